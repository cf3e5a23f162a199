// Package integration tests the storage-controller as it runs: its reconciler, claim webhook and
// scheduler extender against a real kube-apiserver, etcd and kube-scheduler, with the LINSTOR test
// double behind the OpenAPI checker.
package integration
