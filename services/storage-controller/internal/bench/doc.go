// Package bench measures the storage-controller for docs/benchmarks.md (`make bench`).
package bench
