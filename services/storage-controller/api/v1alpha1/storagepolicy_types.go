package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StoragePolicy is a class of block storage on LINSTOR/DRBD: how many replicas, on which storage
// pools and nodes, spread over which topology, and whether a pod running away from its data gets
// a local replica. The storage-controller turns it into a LINSTOR resource group and a
// StorageClass of the same name for the LINSTOR CSI driver, and reports in status how much a
// volume of this policy can still hold.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Spread",type=string,JSONPath=`.spec.topologyKey`
// +kubebuilder:printcolumn:name="Largest",type=string,JSONPath=`.status.largestVolume`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be lower-case letters, digits and dashes (it names the StorageClass and the LINSTOR resource group)"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 39",message="metadata.name may be at most 39 characters: the LINSTOR resource group flotilla-<name> must fit LINSTOR's 48"
type StoragePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec StoragePolicySpec `json:"spec"`
	// +optional
	Status StoragePolicyStatus `json:"status,omitempty"`
}

// StoragePolicySpec declares where and how the volumes of a policy are placed.
// +kubebuilder:validation:XValidation:rule="!has(self.topologyKey) || self.replicas > 1",message="spec.topologyKey spreads replicas: it needs spec.replicas of 2 or 3"
// +kubebuilder:validation:XValidation:rule="!has(self.autoDiskful) || !self.autoDiskful.enabled || self.replicas > 1",message="spec.autoDiskful needs spec.replicas of 2 or 3: a local volume (1 replica) has no replica to bring next to its pod"
type StoragePolicySpec struct {
	// Replicas is the number of diskful copies of each volume: 1 keeps a volume on one node
	// (local), 2 or 3 replicate it with DRBD.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3
	Replicas int32 `json:"replicas"`

	// StoragePools are the LINSTOR storage pools replicas may be placed in.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=48
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +listType=set
	StoragePools []string `json:"storagePools"`

	// NodeSelector limits replicas to the nodes whose Kubernetes labels match. LINSTOR nodes are
	// named after their Kubernetes nodes. Empty: every node.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// TopologyKey puts each replica of a volume on a different value of this node label
	// (topology.kubernetes.io/zone, a rack label, …). LINSTOR reads it from the node's
	// Aux/<key> property, which the LINSTOR operator copies from the node's labels.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	TopologyKey string `json:"topologyKey,omitempty"`

	// AutoDiskful gives a node that uses a volume without holding a replica (a diskless DRBD
	// client) a replica of its own once it has used it for a while.
	// +optional
	AutoDiskful *AutoDiskful `json:"autoDiskful,omitempty"`

	// Filesystem of the volumes.
	// +optional
	// +kubebuilder:default=ext4
	// +kubebuilder:validation:Enum=ext4;xfs
	Filesystem string `json:"filesystem,omitempty"`

	// VolumeBindingMode of the StorageClass. WaitForFirstConsumer lets the scheduler pick the
	// node first, so that a local volume is made where its pod runs.
	// +optional
	// +kubebuilder:default=WaitForFirstConsumer
	// +kubebuilder:validation:Enum=Immediate;WaitForFirstConsumer
	VolumeBindingMode string `json:"volumeBindingMode,omitempty"`
}

// AutoDiskful is LINSTOR's auto-diskful: a diskless node that has been DRBD Primary for
// After becomes diskful.
type AutoDiskful struct {
	// Enabled turns auto-diskful on.
	Enabled bool `json:"enabled"`
	// After is how long a node must use the volume before it gets a replica. LINSTOR counts in
	// whole minutes.
	// +optional
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="spec.autoDiskful.after must be between 1m and 168h"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 60000 == 0",message="spec.autoDiskful.after must be whole minutes: LINSTOR counts auto-diskful in minutes"
	After *metav1.Duration `json:"after,omitempty"`
	// AllowCleanup lets LINSTOR remove a replica that became superfluous once a new one is up to
	// date, as long as the policy's number of up-to-date diskful replicas remains.
	// +optional
	AllowCleanup bool `json:"allowCleanup,omitempty"`
}

// StoragePolicyStatus is what the storage-controller observed.
type StoragePolicyStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled and the domain conditions (LinstorReachable,
	// ResourceGroupReady, StorageClassReady).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ResourceGroup is the LINSTOR resource group of the policy.
	// +optional
	ResourceGroup string `json:"resourceGroup,omitempty"`
	// StorageClassName is the StorageClass of the policy.
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`
	// LargestVolume is the largest volume one qualifying set of replicas can still hold.
	// +optional
	LargestVolume *resource.Quantity `json:"largestVolume,omitempty"`
	// Pools is the capacity of each qualifying storage pool, by node.
	// +optional
	// +listType=atomic
	Pools []PoolCapacity `json:"pools,omitempty"`
}

// PoolCapacity is one storage pool on one node.
type PoolCapacity struct {
	Node string `json:"node"`
	Pool string `json:"pool"`
	// Topology is the node's value of the policy's topologyKey, if any.
	// +optional
	Topology string            `json:"topology,omitempty"`
	Free     resource.Quantity `json:"free"`
	Total    resource.Quantity `json:"total"`
}

// GetConditions returns the conditions.
func (p *StoragePolicy) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions replaces the conditions.
func (p *StoragePolicy) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// GetObservedGeneration returns the generation last acted upon.
func (p *StoragePolicy) GetObservedGeneration() int64 { return p.Status.ObservedGeneration }

// SetObservedGeneration records the generation acted upon.
func (p *StoragePolicy) SetObservedGeneration(g int64) { p.Status.ObservedGeneration = g }

// +kubebuilder:object:root=true

// StoragePolicyList is a list of StoragePolicies.
type StoragePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StoragePolicy `json:"items"`
}
