package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantNetwork is a tenant's own network on OVN, with an address range the tenant chooses: it may
// overlap any other tenant's, because each network gets a logical router of its own, attached to
// the platform's transit network only through its NAT addresses (SNAT for traffic leaving the
// network, DNAT "floating" addresses for chosen workloads). External addresses are drawn from the
// platform's external range, with a per-tenant limit.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="SNAT",type=string,JSONPath=`.status.snatIP`
// +kubebuilder:printcolumn:name="Router",type=string,JSONPath=`.status.router`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && self.metadata.name.size() <= 63",message="metadata.name must be a DNS label"
type TenantNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TenantNetworkSpec `json:"spec"`
	// +optional
	Status TenantNetworkStatus `json:"status,omitempty"`
}

// TenantNetworkSpec is the tenant's network as the tenant declares it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.floatingIPs) || !isCIDR(self.cidr) || self.floatingIPs.all(f, !isIP(f.internalIP) || cidr(self.cidr).containsIP(f.internalIP))",message="spec.floatingIPs[].internalIP must lie inside spec.cidr"
type TenantNetworkSpec struct {
	// CIDR is the network's IPv4 range, chosen by the tenant, in canonical form (192.168.0.0/24);
	// it may overlap other tenants'. Immutable: workloads hold addresses from it.
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="spec.cidr must be an IPv4 CIDR such as 192.168.0.0/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="spec.cidr must be canonical: no host bits set (192.168.0.0/24, not 192.168.0.1/24)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || (cidr(self).prefixLength() >= 8 && cidr(self).prefixLength() <= 29)",message="spec.cidr must have a prefix length between 8 and 29"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cidr is immutable"
	CIDR string `json:"cidr"`
	// SNAT lets the network's traffic leave through one platform address.
	// +optional
	SNAT bool `json:"snat,omitempty"`
	// FloatingIPs are platform addresses DNATed to chosen workload addresses.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	FloatingIPs []FloatingIP `json:"floatingIPs,omitempty"`
}

// FloatingIP maps one platform address onto one address inside the network.
type FloatingIP struct {
	// Name identifies the floating address within the network.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="spec.floatingIPs[].name must be a DNS label"
	Name string `json:"name"`
	// InternalIP is the workload's address inside spec.cidr.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="spec.floatingIPs[].internalIP must be an IPv4 address"
	InternalIP string `json:"internalIP"`
}

// TenantNetworkStatus reports what was programmed into OVN.
type TenantNetworkStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled, AddressesReady, OVNReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Router is the name of the network's OVN logical router.
	// +optional
	Router string `json:"router,omitempty"`
	// Switch is the name of the network's OVN logical switch.
	// +optional
	Switch string `json:"switch,omitempty"`
	// SNATIP is the platform address the network's traffic leaves as.
	// +optional
	SNATIP string `json:"snatIP,omitempty"`
	// FloatingIPs are the platform addresses given to spec.floatingIPs, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	FloatingIPs []FloatingIPStatus `json:"floatingIPs,omitempty"`
}

// FloatingIPStatus is the platform address of one floating IP.
type FloatingIPStatus struct {
	// Name is the floating IP's name in spec.floatingIPs.
	Name string `json:"name"`
	// ExternalIP is the platform address.
	ExternalIP string `json:"externalIP"`
}

// TenantNetworkList is a list of TenantNetworks.
//
// +kubebuilder:object:root=true
type TenantNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantNetwork `json:"items"`
}
