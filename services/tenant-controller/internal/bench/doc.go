// Package bench measures the tenant-controller for `make bench`: a 1,000-tenant tree (depth 4) to
// all Ready against the floor of creating the same objects directly, the API writes it makes once
// converged, and its peak memory. It holds benchmarks only; `make test` runs none of it.
package bench
