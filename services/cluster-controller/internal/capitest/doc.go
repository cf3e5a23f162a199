// Package capitest runs the cluster-controller together with the real Cluster API core
// controllers and kubeadm bootstrap provider (sigs.k8s.io/cluster-api v1.13.6, built from the
// module proxy by libs/builder), so that Cluster → MachineDeployment → MachineSet → Machine and
// each worker's join data are Cluster API's own logic, and with the local provider stand-in
// (internal/localprovider) playing Kamaji and KubeVirt: a real kube-apiserver per cluster on the
// platform's etcd, which the customer reaches with its kubeconfig, and a Node in it per VM. Each
// test runs its own stand-in on its own namespace, so its API servers and ports are its own.
// The attack tests impersonate tenant admins with the tenant-controller's roles and the
// cluster-controller's admission policy installed as the charts ship them.
package capitest
