package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SchedulingClass is a placement for a service's pods: which nodes, and how the pods of one
// service lie over a topology (zones, racks): spread over its values, or packed into one. A pod
// takes the class of its namespace (the tenant-controller labels a tenant's namespaces with
// tenancy.flotilla.dev/scheduling-class); a pod in a namespace without one may name a class with
// the annotation storage.flotilla.dev/scheduling-class. The storage-controller writes the class
// into the pod at admission (node selector, topology spread constraints or pod affinity), so the
// real kube-scheduler enforces it; a pod whose class does not exist is held by a scheduling gate.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology.key`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.topology.policy`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.metadata.name.size() <= 63",message="metadata.name must be a DNS label (it is a label value on namespaces)"
type SchedulingClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SchedulingClassSpec `json:"spec"`
	// +optional
	Status SchedulingClassStatus `json:"status,omitempty"`
}

// SchedulingClassSpec is the placement.
type SchedulingClassSpec struct {
	// NodeSelector: the pods run only on nodes with these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Topology lays the pods of one service over the values of a node label.
	// +optional
	Topology *Topology `json:"topology,omitempty"`

	// GroupLabel is the pod label whose value names the service a pod belongs to, within its
	// namespace: pods with equal values are spread or packed together. Pods without it form one
	// group per namespace.
	// +optional
	// +kubebuilder:default="app.kubernetes.io/instance"
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	GroupLabel string `json:"groupLabel,omitempty"`
}

// Topology is how a service's pods lie over the values of a node label.
// +kubebuilder:validation:XValidation:rule="self.policy == 'Spread' || !has(self.maxSkew)",message="spec.topology.maxSkew applies to the Spread policy only"
type Topology struct {
	// Key is the node label: topology.kubernetes.io/zone, a rack label, a site label.
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	Key string `json:"key"`
	// Policy: Spread puts a service's pods on different values, at most MaxSkew apart; Pack puts
	// them all on one value (the first pod's).
	// +kubebuilder:validation:Enum=Spread;Pack
	Policy string `json:"policy"`
	// MaxSkew is how many more pods one value may have than another (Spread).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxSkew *int32 `json:"maxSkew,omitempty"`
}

// Topology policies.
const (
	TopologySpread = "Spread"
	TopologyPack   = "Pack"
)

// SchedulingClassStatus is what the storage-controller observed.
type SchedulingClassStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GetConditions returns the conditions.
func (c *SchedulingClass) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the conditions.
func (c *SchedulingClass) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// GetObservedGeneration returns the generation last acted upon.
func (c *SchedulingClass) GetObservedGeneration() int64 { return c.Status.ObservedGeneration }

// SetObservedGeneration records the generation acted upon.
func (c *SchedulingClass) SetObservedGeneration(g int64) { c.Status.ObservedGeneration = g }

// +kubebuilder:object:root=true

// SchedulingClassList is a list of SchedulingClasses.
type SchedulingClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SchedulingClass `json:"items"`
}

// Scheduling classes on pods and namespaces.
const (
	// AnnotationSchedulingClass names a pod's class, in a namespace without one.
	AnnotationSchedulingClass = "storage.flotilla.dev/scheduling-class"
	// LabelNamespaceSchedulingClass is the tenant-controller's label naming a tenant namespace's
	// class (tenancy.flotilla.dev/scheduling-class, the tenant API's LabelSchedulingClass).
	LabelNamespaceSchedulingClass = "tenancy.flotilla.dev/scheduling-class"
	// SchedulingGate holds a pod whose class does not exist.
	SchedulingGate = "storage.flotilla.dev/scheduling-class"
	// LabelMissingClass marks a pod held for a class that does not exist, with the class's name.
	LabelMissingClass = "storage.flotilla.dev/missing-scheduling-class"
)
