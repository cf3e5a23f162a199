// Package capitest runs the cluster-controller together with the real Cluster API core
// controllers (the manager of sigs.k8s.io/cluster-api v1.13.6, built from the module proxy by
// libs/builder), so that Cluster → MachineDeployment → MachineSet → Machine is Cluster API's own
// logic. What needs a hypervisor or a hosted API server (the KubevirtCluster's and the
// KamajiControlPlane's status) is written by the test, as the providers would.
package capitest
