package v1alpha1

// Domain condition types of a StoragePolicy, in the order Ready summarises them.
const (
	// LinstorReachableCondition: the LINSTOR controller answered the last reconcile.
	LinstorReachableCondition = "LinstorReachable"
	// ResourceGroupReadyCondition: the LINSTOR resource group matches the spec.
	ResourceGroupReadyCondition = "ResourceGroupReady"
	// StorageClassReadyCondition: the StorageClass exists with the parameters the spec implies.
	StorageClassReadyCondition = "StorageClassReady"
	// PlaceableCondition: enough distinct nodes (or topology values) have a qualifying storage
	// pool for one volume's replicas; its message says how large a volume still fits.
	PlaceableCondition = "Placeable"
)

// Reasons used in StoragePolicy conditions.
const (
	ReconciledReason         = "Reconciled"
	LinstorUnreachableReason = "LinstorUnreachable"
	LinstorErrorReason       = "LinstorError"
	// StorageClassConflictReason: a StorageClass of the policy's name exists that Flotilla did
	// not create; it is left alone.
	StorageClassConflictReason = "StorageClassNotOwned"
	// ResourceGroupConflictReason: a LINSTOR resource group of the policy's name exists that
	// Flotilla did not create; it is left alone.
	ResourceGroupConflictReason = "ResourceGroupNotOwned"
	// StorageClassImmutableReason: the spec asks for StorageClass parameters that differ from
	// the existing class's, and volumes use that class (a StorageClass cannot change).
	StorageClassImmutableReason = "StorageClassImmutable"
	// AdmissionNotReadyReason: the claim webhook cannot be made to check the policy's class yet,
	// so the StorageClass is not made.
	AdmissionNotReadyReason = "AdmissionNotReady"
	// NoCapacityReason: no set of qualifying nodes has room for a single replica set.
	NoCapacityReason = "NoQualifyingNodes"
)

// Labels and annotations of what the storage-controller writes.
const (
	// LabelPolicy marks a StorageClass the storage-controller created, with its policy's name.
	// StorageClasses without it are never touched.
	LabelPolicy = "storage.flotilla.dev/policy"
	// ResourceGroupPrefix starts the name of every LINSTOR resource group Flotilla owns.
	ResourceGroupPrefix = "flotilla-"
	// CSIDriver is the LINSTOR CSI driver's name, the provisioner of Flotilla's StorageClasses.
	CSIDriver = "linstor.csi.linbit.com"
	// ParamResourceGroup is the StorageClass parameter naming the LINSTOR resource group.
	ParamResourceGroup = "linstor.csi.linbit.com/resourceGroup"
	// ParamFSType is the StorageClass parameter naming the filesystem.
	ParamFSType = "csi.storage.k8s.io/fstype"
)

// ResourceGroupName is the LINSTOR resource group of the policy named name.
func ResourceGroupName(policy string) string { return ResourceGroupPrefix + policy }
