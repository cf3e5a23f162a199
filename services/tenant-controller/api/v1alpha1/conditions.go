package v1alpha1

// Domain condition types of a Tenant, in the order Ready summarises them.
const (
	// NamespaceReadyCondition: the tenant's namespace exists with its labels.
	NamespaceReadyCondition = "NamespaceReady"
	// AccessReadyCondition: the role bindings of this tenant and its ancestors are in place.
	AccessReadyCondition = "AccessReady"
	// QuotaReadyCondition: the ResourceQuota and LimitRange are in place and the tenant's quota
	// fits within its parent's.
	QuotaReadyCondition = "QuotaReady"
	// NetworkPolicyReadyCondition: the isolation policies are in place.
	NetworkPolicyReadyCondition = "NetworkPolicyReady"
	// DeliveryReadyCondition: the delivery namespace, identity and its bindings are in place
	// (see DeliveryNamespace).
	DeliveryReadyCondition = "DeliveryReady"
)

// Reasons used in Tenant conditions.
const (
	ReconciledReason          = "Reconciled"
	ParentNotFoundReason      = "ParentNotFound"
	InvalidPlacementReason    = "InvalidPlacement"
	ParentQuotaExceededReason = "ParentQuotaExceeded"
	QuotaNotDeclaredReason    = "QuotaNotDeclared"
	SchedulingConflictReason  = "SchedulingClassConflict"
	NamespaceConflictReason   = "NamespaceNotOwned"
	DeletionBlockedReason     = "DeletionBlocked"
	WaitingForChildrenReason  = "WaitingForChildren"
)

// Labels and annotations the tenant-controller puts on tenant namespaces, for other services.
const (
	// LabelTenant is the name of the tenant owning the namespace.
	LabelTenant = "tenancy.flotilla.dev/tenant"
	// LabelParent is the namespace of the parent tenant (absent on the root).
	LabelParent = "tenancy.flotilla.dev/parent"
	// LabelDepth is the tenant's depth below the root.
	LabelDepth = "tenancy.flotilla.dev/depth"
	// LabelPath is the dot-separated path from the root: root.acme.dev.
	LabelPath = "tenancy.flotilla.dev/path"
	// LabelIngress, LabelMonitoring and LabelEtcd name the namespace providing that service.
	LabelIngress    = "tenancy.flotilla.dev/ingress"
	LabelMonitoring = "tenancy.flotilla.dev/monitoring"
	LabelEtcd       = "tenancy.flotilla.dev/etcd"
	// LabelSchedulingClass is the scheduling class in effect.
	LabelSchedulingClass = "tenancy.flotilla.dev/scheduling-class"
	// AnnotationHost is the host in effect (annotation: hosts may exceed a label's 63 characters).
	AnnotationHost = "tenancy.flotilla.dev/host"
	// AnnotationOwnerUID marks a namespace the tenant-controller created, with the UID of the
	// tenant it created it for. Namespaces without it are never deleted by the controller.
	AnnotationOwnerUID = "tenancy.flotilla.dev/owner-uid"
	// LabelService marks the pods of a shared service (ingress, monitoring, etcd) that descendants
	// using the service may reach through the network isolation.
	LabelService = "tenancy.flotilla.dev/service"
	// LabelPlatform marks platform namespaces (kube-system, the platform's controllers, …) whose
	// pods may reach every tenant.
	LabelPlatform = "flotilla.dev/platform"
	// LabelAncestorPrefix: a tenant namespace carries AncestorLabel(ns)="true" for the namespace
	// of each of its ancestors, so that an ancestor can select its whole subtree (its network
	// isolation lets its descendants in).
	LabelAncestorPrefix = "ancestor.tenancy.flotilla.dev/"
)

// AncestorLabel is the label a tenant namespace below the tenant of namespace ns carries.
func AncestorLabel(ns string) string { return LabelAncestorPrefix + ns }

// RootNamespace is the platform's root tenant namespace, and RootName the root tenant's name.
const (
	RootNamespace = "tenant-root"
	RootName      = "root"
)

// Finalizer guards a tenant's teardown.
const Finalizer = "tenancy.flotilla.dev/finalizer"
