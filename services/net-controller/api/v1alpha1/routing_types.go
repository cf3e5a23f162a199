package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Priorities and tables the node agent may use: rules outside the range and the kernel's own tables
// are never written, so the agent cannot shadow the platform's routing.
const (
	// MinRulePriority is the lowest rule priority a RoutingPolicy may use.
	MinRulePriority = 10000
	// MaxRulePriority is the highest rule priority a RoutingPolicy may use.
	MaxRulePriority = 19999
	// MinTable and MaxTable bound the routing tables a RoutingPolicy may use (the kernel reserves
	// 0 and 253-255; the platform keeps 1-99 and everything above MaxTable).
	MinTable = 100
	MaxTable = 199
)

// RoutingPolicy is source routing for the nodes its selector matches: rules sending traffic by
// source address, input interface or firewall mark to a table, and the routes of those tables. A
// node agent applies it with netlink and reports per node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type RoutingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RoutingPolicySpec `json:"spec"`
	// +optional
	Status RoutingPolicyStatus `json:"status,omitempty"`
}

// RoutingPolicySpec lists the rules and routes for the selected nodes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.rules) || self.rules.all(r, self.rules.exists_one(o, o.priority == r.priority))",message="spec.rules[].priority must be unique within the policy"
type RoutingPolicySpec struct {
	// NodeSelector chooses the nodes; absent, all nodes.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Rules are the policy rules.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Rules []Rule `json:"rules,omitempty"`
	// Routes are the routes of the rules' tables.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	Routes []Route `json:"routes,omitempty"`
}

// Rule is one policy routing rule: traffic matching every field set goes to Table. A rule without
// From is an IPv4 rule.
//
// +kubebuilder:validation:XValidation:rule="has(self.from) || has(self.iif) || has(self.fwmark)",message="spec.rules[] must match on from, iif or fwmark"
type Rule struct {
	// Priority orders the rule among the node's rules; unique within the policy.
	// +kubebuilder:validation:Minimum=10000
	// +kubebuilder:validation:Maximum=19999
	Priority int32 `json:"priority"`
	// From matches the source address range.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="spec.rules[].from must be a CIDR such as 10.1.0.0/24"
	From string `json:"from,omitempty"`
	// IIF matches the input interface.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][-_.a-zA-Z0-9]*$`
	IIF string `json:"iif,omitempty"`
	// FWMark matches the firewall mark.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	FWMark int64 `json:"fwmark,omitempty"`
	// Table is the routing table traffic goes to (100-199).
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=199
	Table int32 `json:"table"`
}

// Route is one route in a policy table.
//
// +kubebuilder:validation:XValidation:rule="has(self.gateway) || has(self.device)",message="spec.routes[] needs a gateway, a device or both"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !isCIDR(self.destination) || ip(self.gateway).family() == cidr(self.destination).ip().family()",message="spec.routes[].gateway must be of the destination's address family"
type Route struct {
	// Table is the routing table (100-199).
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=199
	Table int32 `json:"table"`
	// Destination is the range routed; 0.0.0.0/0 for a default route.
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="spec.routes[].destination must be a CIDR such as 0.0.0.0/0"
	Destination string `json:"destination"`
	// Gateway is the next hop.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="spec.routes[].gateway must be an IP address"
	Gateway string `json:"gateway,omitempty"`
	// Device is the output interface.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][-_.a-zA-Z0-9]*$`
	Device string `json:"device,omitempty"`
}

// RoutingPolicyStatus summarises the nodes' reports.
type RoutingPolicyStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RoutingPolicyList is a list of RoutingPolicies.
//
// +kubebuilder:object:root=true
type RoutingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RoutingPolicy `json:"items"`
}

// NodeRouting is what the node agent on one node applied: named after the node, written only by
// that node's agent. A node whose rules could not all be applied is visible with
// `kubectl get noderoutings`.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Rules",type=integer,JSONPath=`.status.rules`
// +kubebuilder:printcolumn:name="Routes",type=integer,JSONPath=`.status.routes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type NodeRouting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status NodeRoutingStatus `json:"status,omitempty"`
}

// NodeRoutingStatus reports the node's applied rules and routes.
type NodeRoutingStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled, Applied.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Policies are the RoutingPolicies applied on the node, with the generation applied.
	// +optional
	// +listType=map
	// +listMapKey=name
	Policies []AppliedPolicy `json:"policies,omitempty"`
	// Refused are the RoutingPolicies selecting the node that it cannot apply, each left out whole.
	// +optional
	// +listType=map
	// +listMapKey=name
	Refused []RefusedPolicy `json:"refused,omitempty"`
	// Rules is how many rules the agent keeps on the node.
	// +optional
	Rules int32 `json:"rules,omitempty"`
	// Routes is how many routes the agent keeps on the node.
	// +optional
	Routes int32 `json:"routes,omitempty"`
}

// AppliedPolicy is one RoutingPolicy as applied on a node.
type AppliedPolicy struct {
	// Name is the RoutingPolicy's name.
	Name string `json:"name"`
	// Generation is the generation of the policy applied.
	Generation int64 `json:"generation"`
}

// RefusedPolicy is a RoutingPolicy a node cannot apply, and why.
type RefusedPolicy struct {
	// Name is the RoutingPolicy's name.
	Name string `json:"name"`
	// Generation is the generation of the policy refused.
	Generation int64 `json:"generation"`
	// Reason is a CamelCase reason (UnknownInterface, PolicyConflict).
	Reason string `json:"reason"`
	// Message says which field and why.
	Message string `json:"message"`
}

// NodeRoutingList is a list of NodeRoutings.
//
// +kubebuilder:object:root=true
type NodeRoutingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRouting `json:"items"`
}

// GetConditions implements meta.ObjectWithConditions.
func (n *NodeRouting) GetConditions() []metav1.Condition { return n.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (n *NodeRouting) SetConditions(c []metav1.Condition) { n.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (n *NodeRouting) GetObservedGeneration() int64 { return n.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (n *NodeRouting) SetObservedGeneration(g int64) { n.Status.ObservedGeneration = g }
