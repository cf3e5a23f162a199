// Package bench measures a usage report for the root tenant over 1,000 workloads × 7 days of
// 60 s samples in a real VictoriaMetrics, against the same MetricsQL queries asked directly in the
// same run (`make bench` writes docs/benchmarks.md).
package bench
