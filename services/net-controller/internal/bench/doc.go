// Package bench measures the net-controller for docs/benchmarks.md (`make bench`): the node agent
// against `ip -batch` of the same rules and routes, and the OVN programmer against one
// `ovn-nbctl` batch creating the same rows, each in the same run, plus the writes at steady state.
package bench
