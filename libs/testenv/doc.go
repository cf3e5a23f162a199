// Package testenv starts a real Kubernetes control plane for tests and for `make demo`: etcd,
// kube-apiserver and (for namespace deletion and garbage collection) kube-controller-manager,
// built from source by libs/builder and run through controller-runtime's envtest; and a real OVN
// (ovsdb-server NB and SB, ovn-northd) from Debian's packages, fetched without root (StartOVN).
package testenv
