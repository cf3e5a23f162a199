package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LoadBalancerPool is a platform range of addresses for tenants' LoadBalancer Services: each tenant
// namespace it selects gets one block of it as a MetalLB IPAddressPool (metallb.io/v1beta1) that
// only Services of that namespace may draw from, announced by an L2Advertisement. Blocks are cut
// as a SubnetPool's are (block i is the i-th block of the CIDRs in order), so CIDRs may only be
// appended. How many LoadBalancer Services a tenant may have is its quota's
// services.loadbalancers, enforced by kube-apiserver.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="IPv4",type=string,JSONPath=`.spec.ipv4.cidrs`
// +kubebuilder:printcolumn:name="IPv6",type=string,JSONPath=`.spec.ipv6.cidrs`
// +kubebuilder:printcolumn:name="Blocks",type=integer,JSONPath=`.status.blocks`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && self.metadata.name.size() <= 40",message="metadata.name must be a DNS label of at most 40 characters (it prefixes the MetalLB pool names)"
type LoadBalancerPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec LoadBalancerPoolSpec `json:"spec"`
	// +optional
	Status PoolStatus `json:"status,omitempty"`
}

// LoadBalancerPoolSpec declares the pool's ranges, which tenant namespaces use it and where its
// addresses are announced.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="spec must set spec.ipv4, spec.ipv6 or both"
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) == has(oldSelf.ipv4) && has(self.ipv6) == has(oldSelf.ipv6)",message="spec.ipv4 and spec.ipv6 cannot be added or removed once the pool exists: tenants hold blocks of both families or one"
// +kubebuilder:validation:XValidation:rule="!has(self.routing) || !has(self.interfaces) || size(self.interfaces) == 0 || self.routing.interface in self.interfaces",message="spec.routing.interface must be one of spec.interfaces: replies leave where the addresses are announced"
type LoadBalancerPoolSpec struct {
	// IPv4 is the pool's IPv4 range; blockPrefixLength 32 gives each tenant one address.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 4)",message="spec.ipv4.cidrs must be IPv4 CIDRs"
	// +kubebuilder:validation:XValidation:rule="self.blockPrefixLength <= 32",message="spec.ipv4.blockPrefixLength must be at most 32"
	IPv4 *BlockRange `json:"ipv4,omitempty"`
	// IPv6 is the pool's IPv6 range.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 6)",message="spec.ipv6.cidrs must be IPv6 CIDRs"
	IPv6 *BlockRange `json:"ipv6,omitempty"`
	// NamespaceSelector chooses the tenant namespaces that draw from this pool; absent, all of
	// them. A namespace several pools select draws from the first by name.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Interfaces are the node interfaces MetalLB announces the pool's addresses from (its
	// L2Advertisement's spec.interfaces); absent, every interface.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9][-_.a-zA-Z0-9]*$`
	Interfaces []string `json:"interfaces,omitempty"`
	// Routing, when set, makes replies from the pool's addresses leave through the pool's
	// interface on the nodes it selects: the net-controller derives a RoutingPolicy named
	// lbpool-<pool> (one rule per CIDR from the pool's range to Table, and a default route per
	// family in Table through Interface) that the node agents apply like any other.
	// +optional
	Routing *PoolRouting `json:"routing,omitempty"`
}

// PoolRouting is the source routing of a LoadBalancerPool's addresses on the nodes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4Gateway) || !isIP(self.ipv4Gateway) || ip(self.ipv4Gateway).family() == 4",message="spec.routing.ipv4Gateway must be an IPv4 address"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6Gateway) || !isIP(self.ipv6Gateway) || ip(self.ipv6Gateway).family() == 6",message="spec.routing.ipv6Gateway must be an IPv6 address"
type PoolRouting struct {
	// Interface is the node interface replies from the pool's addresses leave through.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][-_.a-zA-Z0-9]*$`
	Interface string `json:"interface"`
	// IPv4Gateway is the next hop of IPv4 replies on Interface; absent, they are sent on-link.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="spec.routing.ipv4Gateway must be an IP address"
	IPv4Gateway string `json:"ipv4Gateway,omitempty"`
	// IPv6Gateway is the next hop of IPv6 replies on Interface; absent, they are sent on-link.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="spec.routing.ipv6Gateway must be an IP address"
	IPv6Gateway string `json:"ipv6Gateway,omitempty"`
	// Table is the routing table of the pool's replies (100-199), the pool's own.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=199
	Table int32 `json:"table"`
	// Priority is the priority of the first rule; the pool's CIDRs take Priority, Priority+1, …
	// in order (IPv4 first), so leave room for 32.
	// +kubebuilder:validation:Minimum=10000
	// +kubebuilder:validation:Maximum=19968
	Priority int32 `json:"priority"`
	// NodeSelector chooses the nodes the rules go on; absent, all nodes.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// PoolStatus reports how full a pool (a SubnetPool, a LoadBalancerPool) is.
type PoolStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Blocks is how many tenant blocks the pool holds (dual-stack: the smaller family's count).
	// +optional
	Blocks int64 `json:"blocks,omitempty"`
	// Allocated is how many blocks tenant namespaces hold.
	// +optional
	Allocated int64 `json:"allocated,omitempty"`
}

// LoadBalancerPoolList is a list of LoadBalancerPools.
//
// +kubebuilder:object:root=true
type LoadBalancerPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoadBalancerPool `json:"items"`
}

// TenantAddressPool reports the load-balancer addresses of one tenant namespace: its block of a
// LoadBalancerPool and the MetalLB IPAddressPool holding it. It is named after the namespace and
// written only by the net-controller.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.pool`
// +kubebuilder:printcolumn:name="IPv4",type=string,JSONPath=`.status.ipv4`
// +kubebuilder:printcolumn:name="IPv6",type=string,JSONPath=`.status.ipv6`
// +kubebuilder:printcolumn:name="Quota",type=string,JSONPath=`.status.quota`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type TenantAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status TenantAddressPoolStatus `json:"status,omitempty"`
}

// TenantAddressPoolStatus is the namespace's block and the state of its MetalLB pool.
type TenantAddressPoolStatus struct {
	BlockStatus `json:",inline"`
	// AddressPool is the MetalLB IPAddressPool (namespace/name) holding the block.
	// +optional
	AddressPool string `json:"addressPool,omitempty"`
	// Quota is the namespace's services.loadbalancers quota (the smallest of its ResourceQuotas),
	// empty when none caps it.
	// +optional
	Quota string `json:"quota,omitempty"`
}

// TenantAddressPoolList is a list of TenantAddressPools.
//
// +kubebuilder:object:root=true
type TenantAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantAddressPool `json:"items"`
}
