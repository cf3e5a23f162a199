package v1alpha1

// Domain condition types of a KubernetesCluster, in the order Ready summarises them.
const (
	// InfrastructureReadyCondition: the CAPI Cluster and the KubevirtCluster exist and the
	// infrastructure provider reports the cluster's infrastructure ready.
	InfrastructureReadyCondition = "InfrastructureReady"
	// ControlPlaneReadyCondition: the hosted control plane (KamajiControlPlane) reports ready and
	// has an endpoint.
	ControlPlaneReadyCondition = "ControlPlaneReady"
	// WorkersReadyCondition: every node group has its desired number of ready machines; the
	// message counts ready/desired per group.
	WorkersReadyCondition = "WorkersReady"
	// AddonsReadyCondition: every add-on's HelmRelease reports its current generation installed
	// in the customer's cluster; True when the cluster has no add-ons.
	AddonsReadyCondition = "AddonsReady"
	// CloudControllersReadyCondition: the cluster's cloud-controller-manager, CSI controller and
	// cluster-autoscaler, run by the platform outside the tenant's reach, are available at their
	// current generation. Set only where the platform runs them (an infrastructure namespace).
	CloudControllersReadyCondition = "CloudControllersReady"
)

// Reasons used in KubernetesCluster conditions.
const (
	ReconciledReason = "Reconciled"
	// WaitingReason: an owned object has not yet reported on the current generation.
	WaitingReason = "Waiting"
	// ProgressingReason: an owned object reports its current generation, and is not ready yet.
	ProgressingReason = "Progressing"
	// ApplyFailedReason: writing an owned object failed.
	ApplyFailedReason = "ApplyFailed"
	// ConflictReason: an object of a name the cluster needs exists and was not created for it; it
	// is left alone.
	ConflictReason = "NotOwned"
	// NoDatastoreReason: no etcd serves the cluster's tenant namespace.
	NoDatastoreReason = "NoDatastore"
	// UnknownReferenceReason: the spec names something that does not exist (a StorageClass).
	UnknownReferenceReason = "UnknownReference"
	// DeletingReason: the cluster is being torn down; the message names what it waits for.
	DeletingReason = "Deleting"
)

// Labels and annotations of what the cluster-controller writes.
const (
	// LabelCluster marks every object the cluster-controller created for a KubernetesCluster,
	// with the cluster's name. Objects without it are never changed or deleted.
	LabelCluster = "cluster.flotilla.dev/cluster"
	// LabelNodeGroup marks the objects of one node group, with the group's name.
	LabelNodeGroup = "cluster.flotilla.dev/node-group"
	// LabelAddon marks an add-on's HelmRelease, with the add-on's name.
	LabelAddon = "cluster.flotilla.dev/addon"
	// LabelClusterNamespace names, on an object in the platform's infrastructure namespace, the
	// namespace of the KubernetesCluster it serves (LabelCluster its name).
	LabelClusterNamespace = "cluster.flotilla.dev/namespace"
	// AnnotationOwner holds, on an object in the platform's infrastructure namespace, the UID of
	// the KubernetesCluster it belongs to: no owner reference crosses namespaces, and without
	// this annotation an object is never changed or deleted.
	AnnotationOwner = "cluster.flotilla.dev/owner"
	// LabelClusterUID holds the UID of the KubernetesCluster whose cloud-controller-manager made
	// a load balancer's Service in the cluster's namespace (the CCM's infraLabels): they are
	// deleted with the cluster, whose customer Services can no longer release them.
	LabelClusterUID = "cluster.flotilla.dev/cluster-uid"
	// LabelEtcdNamespace names, on a Kamaji DataStore, the tenant namespace whose etcd it
	// describes: the cluster-controller made it for the clusters that etcd serves. A DataStore
	// without it is never changed or deleted.
	LabelEtcdNamespace = "cluster.flotilla.dev/etcd-namespace"
	// LabelTenantService names, on a load balancer's Service made by the KubeVirt
	// cloud-controller-manager, the customer's Service it serves.
	LabelTenantService = "cluster.x-k8s.io/tenant-service-name"
)
