package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Domain condition types, summarised into Ready.
const (
	// AllocatedCondition (TenantSubnet): the namespace holds a block of a SubnetPool.
	AllocatedCondition = "Allocated"
	// SubnetReadyCondition (TenantSubnet): the Kube-OVN Subnet is written and bound to the namespace.
	SubnetReadyCondition = "SubnetReady"
	// RangesValidCondition (SubnetPool): the pool's ranges overlap no other pool's.
	RangesValidCondition = "RangesValid"
	// AddressesReadyCondition (TenantNetwork): its platform addresses are allocated.
	AddressesReadyCondition = "AddressesReady"
	// OVNReadyCondition (TenantNetwork): its rows are in the OVN northbound database.
	OVNReadyCondition = "OVNReady"
	// AppliedCondition (NodeRouting): every selected policy's rules and routes are on the node.
	AppliedCondition = "Applied"
	// AddressPoolReadyCondition (TenantAddressPool): the MetalLB IPAddressPool holding the block is
	// written, usable only by the namespace's Services.
	AddressPoolReadyCondition = "AddressPoolReady"
	// AdvertisedCondition (LoadBalancerPool): the pool's L2Advertisement is written.
	AdvertisedCondition = "Advertised"
	// RoutedCondition (LoadBalancerPool): the RoutingPolicy derived from the pool's routing is
	// written (or there is none to write).
	RoutedCondition = "Routed"
)

// Reasons used in conditions.
const (
	ReconciledReason = "Reconciled"
	// NoPoolReason: no SubnetPool selects the namespace.
	NoPoolReason = "NoPool"
	// PoolNotGuardedReason: the pool that selects the namespace does not carry the finalizer that
	// keeps it while blocks of it are held (its controller adds it moments after its creation).
	PoolNotGuardedReason = "PoolNotGuarded"
	// PoolExhaustedReason: every block of the pool is held.
	PoolExhaustedReason = "PoolExhausted"
	// PoolOverlapReason: a pool's ranges overlap an older pool's.
	PoolOverlapReason = "PoolOverlap"
	// SubnetInUseReason: a released namespace's subnet still holds addresses.
	SubnetInUseReason = "SubnetInUse"
	// SubnetConflictReason: a Kube-OVN Subnet of the wanted name exists and is not the controller's.
	SubnetConflictReason = "SubnetNotOwned"
	// AddressesExhaustedReason: the external range or the tenant's limit has no address left.
	AddressesExhaustedReason = "AddressesExhausted"
	// OVNUnavailableReason: the northbound database cannot be reached.
	OVNUnavailableReason = "OVNUnavailable"
	// PolicyConflictReason: a policy uses a priority an earlier policy (by name) uses on the node.
	PolicyConflictReason = "PolicyConflict"
	// UnknownInterfaceReason: a policy names an interface the node does not have.
	UnknownInterfaceReason = "UnknownInterface"
	// ApplyFailedReason: the kernel refused a rule or route.
	ApplyFailedReason = "ApplyFailed"
	// AddressPoolInUseReason: a released namespace's addresses are still held by Services.
	AddressPoolInUseReason = "AddressPoolInUse"
	// NotOwnedReason: an object of the name the controller wants exists and is not the controller's.
	NotOwnedReason = "NotOwned"
	// InvalidNodeSelectorReason: a RoutingPolicy's spec.nodeSelector is not a valid label selector.
	InvalidNodeSelectorReason = "InvalidNodeSelector"
)

// Labels the net-controller puts on what it creates.
const (
	// LabelNamespace on a Kube-OVN Subnet: the tenant namespace holding the block.
	LabelNamespace = "net.flotilla.dev/namespace"
	// LabelPool on a Kube-OVN Subnet: the SubnetPool the block comes from.
	LabelPool = "net.flotilla.dev/pool"
	// AnnotationBlock on a Kube-OVN Subnet: the block's index in its pool.
	AnnotationBlock = "net.flotilla.dev/block"
	// Finalizer holds a SubnetPool or LoadBalancerPool until no block of it is held (a pool hands
	// out none before it has it), and a TenantNetwork until its rows are out of OVN.
	Finalizer = "net.flotilla.dev/release"
)

// GetConditions implements meta.ObjectWithConditions.
func (p *SubnetPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (p *SubnetPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (p *SubnetPool) GetObservedGeneration() int64 { return p.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (p *SubnetPool) SetObservedGeneration(g int64) { p.Status.ObservedGeneration = g }

// GetConditions implements meta.ObjectWithConditions.
func (t *TenantSubnet) GetConditions() []metav1.Condition { return t.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (t *TenantSubnet) SetConditions(c []metav1.Condition) { t.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (t *TenantSubnet) GetObservedGeneration() int64 { return t.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (t *TenantSubnet) SetObservedGeneration(g int64) { t.Status.ObservedGeneration = g }

// GetConditions implements meta.ObjectWithConditions.
func (n *TenantNetwork) GetConditions() []metav1.Condition { return n.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (n *TenantNetwork) SetConditions(c []metav1.Condition) { n.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (n *TenantNetwork) GetObservedGeneration() int64 { return n.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (n *TenantNetwork) SetObservedGeneration(g int64) { n.Status.ObservedGeneration = g }

// GetConditions implements meta.ObjectWithConditions.
func (r *RoutingPolicy) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (r *RoutingPolicy) SetConditions(c []metav1.Condition) { r.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (r *RoutingPolicy) GetObservedGeneration() int64 { return r.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (r *RoutingPolicy) SetObservedGeneration(g int64) { r.Status.ObservedGeneration = g }

// GetConditions implements meta.ObjectWithConditions.
func (p *LoadBalancerPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (p *LoadBalancerPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (p *LoadBalancerPool) GetObservedGeneration() int64 { return p.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (p *LoadBalancerPool) SetObservedGeneration(g int64) { p.Status.ObservedGeneration = g }

// GetConditions implements meta.ObjectWithConditions.
func (t *TenantAddressPool) GetConditions() []metav1.Condition { return t.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (t *TenantAddressPool) SetConditions(c []metav1.Condition) { t.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (t *TenantAddressPool) GetObservedGeneration() int64 { return t.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (t *TenantAddressPool) SetObservedGeneration(g int64) { t.Status.ObservedGeneration = g }

// Ranges are the pool's address families.
func (p *SubnetPool) Ranges() (ipv4, ipv6 *BlockRange) { return p.Spec.IPv4, p.Spec.IPv6 }

// Selector chooses the tenant namespaces drawing from the pool (nil: all).
func (p *SubnetPool) Selector() *metav1.LabelSelector { return p.Spec.NamespaceSelector }

// Ranges are the pool's address families.
func (p *LoadBalancerPool) Ranges() (ipv4, ipv6 *BlockRange) { return p.Spec.IPv4, p.Spec.IPv6 }

// Selector chooses the tenant namespaces drawing from the pool (nil: all).
func (p *LoadBalancerPool) Selector() *metav1.LabelSelector { return p.Spec.NamespaceSelector }
