// Package integration runs the cluster-controller on a real kube-apiserver and etcd with the real
// CRDs of Cluster API (v1.13.6), CAPK (v0.11.2), Kamaji's control-plane provider (v0.20.0, kept in
// test/crds/kamaji) and the chart's own, but without Cluster API's controllers: fast tests of
// the controller's own logic (validation, upgrade order across releases no binary here runs,
// ownership, the datastore). What Cluster API and the providers would report is written by the
// tests, through providerStandIn. The end-to-end behaviour with Cluster API's real controllers
// and the local provider stand-in is internal/capitest's.
package integration
