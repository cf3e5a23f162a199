package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SubnetPool is a platform range tenant namespaces draw their Kube-OVN subnets from: each tenant
// namespace gets one block of BlockPrefixLength bits from IPv4, from IPv6, or one of each. Block i
// of a pool is the i-th block of its CIDRs taken in order (IPv4 and IPv6 blocks are paired by i), so
// CIDRs may only be appended: a block once handed out keeps its place.
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
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && self.metadata.name.size() <= 40",message="metadata.name must be a DNS label of at most 40 characters (it prefixes the Kube-OVN subnet names)"
type SubnetPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SubnetPoolSpec `json:"spec"`
	// +optional
	Status PoolStatus `json:"status,omitempty"`
}

// SubnetPoolSpec declares the pool's ranges and which tenant namespaces use it.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="spec must set spec.ipv4, spec.ipv6 or both"
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) == has(oldSelf.ipv4) && has(self.ipv6) == has(oldSelf.ipv6)",message="spec.ipv4 and spec.ipv6 cannot be added or removed once the pool exists: tenants' subnets are single- or dual-stack for good"
type SubnetPoolSpec struct {
	// IPv4 is the pool's IPv4 range.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 4)",message="spec.ipv4.cidrs must be IPv4 CIDRs"
	// +kubebuilder:validation:XValidation:rule="self.blockPrefixLength <= 30",message="spec.ipv4.blockPrefixLength must be at most 30: a block needs room for a gateway and hosts"
	IPv4 *BlockRange `json:"ipv4,omitempty"`
	// IPv6 is the pool's IPv6 range.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 6)",message="spec.ipv6.cidrs must be IPv6 CIDRs"
	// +kubebuilder:validation:XValidation:rule="self.blockPrefixLength <= 124",message="spec.ipv6.blockPrefixLength must be at most 124"
	IPv6 *BlockRange `json:"ipv6,omitempty"`
	// NamespaceSelector chooses the tenant namespaces that draw from this pool; absent, all of
	// them. A namespace several pools select draws from the first by name.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// BlockRange is one address family of a pool: CIDRs cut into blocks of BlockPrefixLength.
//
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).prefixLength() <= self.blockPrefixLength)",message="blockPrefixLength must be at least the prefix length of every CIDR in cidrs"
// +kubebuilder:validation:XValidation:rule="!self.cidrs.all(c, isCIDR(c)) || self.cidrs.all(a, self.cidrs.exists_one(b, cidr(a).containsCIDR(b) || cidr(b).containsCIDR(a)))",message="cidrs must not overlap each other"
// +kubebuilder:validation:XValidation:rule="oldSelf.cidrs.all(c, self.cidrs.indexOf(c) == oldSelf.cidrs.indexOf(c))",message="cidrs may only be appended to: tenants hold blocks counted by position"
// +kubebuilder:validation:XValidation:rule="self.blockPrefixLength == oldSelf.blockPrefixLength",message="blockPrefixLength is immutable: tenants hold blocks of that size"
type BlockRange struct {
	// CIDRs are the ranges blocks are cut from, in order, each in canonical form (10.20.0.0/16).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="cidrs must hold CIDRs such as 10.20.0.0/16 or fd00:20::/48"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="cidrs must be canonical: no host bits set (10.20.0.0/16, not 10.20.1.0/16)"
	CIDRs []string `json:"cidrs"`
	// BlockPrefixLength is the prefix length of each tenant's block (24 gives each tenant a /24).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	BlockPrefixLength int32 `json:"blockPrefixLength"`
}

// SubnetPoolList is a list of SubnetPools.
//
// +kubebuilder:object:root=true
type SubnetPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SubnetPool `json:"items"`
}

// TenantSubnet reports the Kube-OVN subnet of one tenant namespace; it is named after the namespace
// and written only by the net-controller (tenants have no access to it). Its conditions say why a
// tenant has no subnet yet: no pool selects it, or the pool is exhausted (with the numbers).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.pool`
// +kubebuilder:printcolumn:name="IPv4",type=string,JSONPath=`.status.ipv4`
// +kubebuilder:printcolumn:name="IPv6",type=string,JSONPath=`.status.ipv6`
// +kubebuilder:printcolumn:name="Subnet",type=string,JSONPath=`.status.subnet`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type TenantSubnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status TenantSubnetStatus `json:"status,omitempty"`
}

// TenantSubnetStatus is the tenant namespace's block and the state of its Kube-OVN subnet.
type TenantSubnetStatus struct {
	BlockStatus `json:",inline"`
	// Subnet is the name of the Kube-OVN Subnet (kubeovn.io/v1) bound to the namespace.
	// +optional
	Subnet string `json:"subnet,omitempty"`
}

// BlockStatus is the block of a pool a tenant namespace holds (a TenantSubnet's of a SubnetPool,
// a TenantAddressPool's of a LoadBalancerPool).
type BlockStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled, Allocated, and SubnetReady or AddressPoolReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Pool is the pool the block comes from.
	// +optional
	Pool string `json:"pool,omitempty"`
	// IPv4 is the namespace's IPv4 block.
	// +optional
	IPv4 string `json:"ipv4,omitempty"`
	// IPv6 is the namespace's IPv6 block.
	// +optional
	IPv6 string `json:"ipv6,omitempty"`
}

// TenantSubnetList is a list of TenantSubnets.
//
// +kubebuilder:object:root=true
type TenantSubnetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantSubnet `json:"items"`
}
