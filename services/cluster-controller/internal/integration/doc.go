// Package integration runs the cluster-controller on a real kube-apiserver and etcd with the real
// CRDs of Cluster API (v1.13.6), CAPK (v0.11.2), Kamaji's control-plane provider (v0.20.0, kept in
// test/crds/kamaji) and the chart's own. What the providers would write into status (a KubeVirt VM
// booting, a hosted API server starting) is written by the tests, through providerStandIn.
package integration
