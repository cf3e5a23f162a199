// Package cluster builds the objects a KubernetesCluster is made of, as pure functions of its spec:
// the Cluster API Cluster, a MachineDeployment, KubeadmConfigTemplate and KubevirtMachineTemplate
// per node group, a MachineHealthCheck, the KubevirtCluster and the KamajiControlPlane. The
// reconciler applies them with server-side apply under one field owner.
package cluster
