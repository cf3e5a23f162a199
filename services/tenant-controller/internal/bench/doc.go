// Package bench measures the tenant-controller for `make bench`: a 1,000-tenant tree (depth 4) to
// all Ready against the floor of creating the same objects directly, per-tenant latency, the
// requests kube-apiserver served per tenant, the API writes the controller makes once converged,
// and its peak memory. It holds benchmarks only; `make test` runs none of it.
//
// Environment: BENCH_OUT (the docs/benchmarks.md to rewrite), BENCH_TENANTS (tree size; 10000 is
// the nightly-sized run, with its own section), BENCH_CONTROLLER_PROFILE and
// BENCH_APISERVER_PROFILE (files for 20-second CPU profiles taken as the controller phase starts),
// BENCH_CONTROLLER_BIN (a controller binary built elsewhere, for a before/after).
package bench
