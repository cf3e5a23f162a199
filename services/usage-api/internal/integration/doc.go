// Package integration tests the usage-api as a tenant meets it: a real kube-apiserver with the
// usage-api registered by an APIService, the real tenant-controller making tenants, their
// namespaces and their roles, and a real VictoriaMetrics holding a known history.
package integration
