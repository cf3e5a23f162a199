// Package bench measures the apps.flotilla.dev API (`make bench`): reads through the aggregator
// as a cluster admin and as a tenant user, against the floor of the same HelmReleases read from
// kube-apiserver's watch cache and the aggregated server read on its own port, at 1,000 and
// 10,000 apps. The figures go into docs/benchmarks.md. BENCH_ONLY=create runs only the create
// figures and prints them (BENCH_CPUPROFILE=file adds a CPU profile of the creates).
package bench
