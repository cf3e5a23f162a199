// Package bench measures the cluster-controller for `make bench` (docs/benchmarks.md): how long
// 100 clusters take to "all owned objects applied" as a ratio to creating the same objects
// directly with client-go in the same run, the controller's API writes in the 60 s after, and
// memory.
package bench
