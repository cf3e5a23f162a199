package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubernetesCluster is a managed Kubernetes cluster of a tenant: a control plane hosted in the
// management cluster (Kamaji, its state in the tenant's etcd) and groups of worker nodes that are
// KubeVirt VMs managed by Cluster API. The cluster-controller turns it into Cluster API objects
// and writes the customer's admin kubeconfig into the Secret named by spec.kubeconfigSecretRef.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=flotilla,shortName=kc
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Workers",type=string,JSONPath=`.status.conditions[?(@.type=="WorkersReady")].message`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be lower-case letters, digits and dashes, starting with a letter (it names the Cluster API objects)"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40",message="metadata.name may be at most 40 characters: <name>-<node group>-<hash> must fit a 63-character label value"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.nodeGroups) || oldSelf.status.nodeGroups.all(g, g.replicas == 0 || self.spec.nodeGroups.exists(n, n.name == g.name))",message="spec.nodeGroups: a node group that still has machines cannot be removed or renamed; scale it to 0 (minReplicas 0) and wait for its machines to go first"
type KubernetesCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec KubernetesClusterSpec `json:"spec"`
	// +optional
	Status KubernetesClusterStatus `json:"status,omitempty"`
}

// KubernetesClusterSpec declares the cluster.
type KubernetesClusterSpec struct {
	// Version is the Kubernetes minor version ("1.37"). It may move up one minor version at a
	// time; the control plane is upgraded first, then the workers. Downgrades are refused.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:Pattern=`^1\.[1-9][0-9]$`
	// +kubebuilder:validation:XValidation:rule="int(self.split('.')[1]) >= int(oldSelf.split('.')[1])",message="spec.version cannot be downgraded"
	// +kubebuilder:validation:XValidation:rule="int(self.split('.')[1]) <= int(oldSelf.split('.')[1]) + 1",message="spec.version may move up one minor version at a time (Kubernetes' version skew policy)"
	Version string `json:"version"`

	// ControlPlane is the hosted control plane.
	// +optional
	// +kubebuilder:default={}
	ControlPlane ControlPlane `json:"controlPlane,omitempty"`

	// NodeGroups are the groups of worker nodes, each scaled by the cluster autoscaler between
	// its minReplicas and maxReplicas. A group is identified by its name: renaming a group
	// replaces its machines, and is refused while it has any.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	NodeGroups []NodeGroup `json:"nodeGroups"`

	// Addons are optional components installed inside the cluster.
	// +optional
	Addons Addons `json:"addons,omitempty"`

	// SchedulingClass places the control plane's pods and the worker VMs (a SchedulingClass of
	// the storage-controller). Empty: the tenant namespace's class.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	SchedulingClass string `json:"schedulingClass,omitempty"`

	// KubeconfigSecretRef names the Secret in the cluster's namespace that receives the admin
	// kubeconfig of the cluster. Default: <name>-admin-kubeconfig.
	// +optional
	KubeconfigSecretRef *LocalSecretReference `json:"kubeconfigSecretRef,omitempty"`
}

// ControlPlane is the hosted control plane of a cluster.
type ControlPlane struct {
	// Replicas is the number of API server replicas.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3
	Replicas int32 `json:"replicas,omitempty"`

	// Resources of each control-plane replica (API server, controller manager and scheduler
	// together). Empty: the platform's default.
	// +optional
	Resources *ControlPlaneResources `json:"resources,omitempty"`

	// Etcd is the datastore holding the cluster's state: the etcd serving the tenant. The starter
	// catalog's chart fills it from the tenant-controller's namespace labels; empty, the
	// controller reads the label tenancy.flotilla.dev/etcd of the cluster's namespace.
	// +optional
	Etcd *EtcdReference `json:"etcd,omitempty"`
}

// ControlPlaneResources are the CPU and memory of one control-plane replica.
// +kubebuilder:validation:XValidation:rule="!has(self.cpu) || quantity(self.cpu).isGreaterThan(quantity('99m'))",message="spec.controlPlane.resources.cpu must be at least 100m"
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || quantity(self.memory).isGreaterThan(quantity('255Mi'))",message="spec.controlPlane.resources.memory must be at least 256Mi"
type ControlPlaneResources struct {
	// CPU of one replica.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory of one replica.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// EtcdReference names the tenant namespace whose etcd stores the cluster's state.
type EtcdReference struct {
	// Namespace of the tenant providing the etcd.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
}

// NodeGroup is a group of identical worker nodes.
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="spec.nodeGroups[].minReplicas must not exceed maxReplicas"
// +kubebuilder:validation:XValidation:rule="has(self.instanceType) != has(self.cpu)",message="spec.nodeGroups[]: set either instanceType or cpu and memory"
// +kubebuilder:validation:XValidation:rule="has(self.cpu) == has(self.memory)",message="spec.nodeGroups[]: cpu and memory go together"
type NodeGroup struct {
	// Name of the group, unique in the cluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// MinReplicas is the fewest nodes the autoscaler keeps.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MinReplicas int32 `json:"minReplicas"`
	// MaxReplicas is the most nodes the autoscaler makes.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxReplicas int32 `json:"maxReplicas"`
	// InstanceType is a size of the platform (small, medium, large).
	// +optional
	// +kubebuilder:validation:Enum=small;medium;large
	InstanceType string `json:"instanceType,omitempty"`
	// CPU cores of each node, instead of an instance type.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	CPU *int32 `json:"cpu,omitempty"`
	// Memory of each node, instead of an instance type.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(self).isGreaterThan(quantity('1023Mi')) && quantity(self).isLessThan(quantity('513Gi'))",message="spec.nodeGroups[].memory must be between 1Gi and 512Gi"
	Memory *resource.Quantity `json:"memory,omitempty"`
	// DiskSize is the size of each node's root disk.
	// +optional
	// +kubebuilder:default="20Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(self).isGreaterThan(quantity('9Gi')) && quantity(self).isLessThan(quantity('2049Gi'))",message="spec.nodeGroups[].diskSize must be between 10Gi and 2Ti"
	DiskSize *resource.Quantity `json:"diskSize,omitempty"`
	// StorageClass of the nodes' disks; the platform default when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	StorageClass string `json:"storageClass,omitempty"`
	// GPUs passed through to each node, by the device name the platform's KubeVirt permits.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	GPUs []GPU `json:"gpus,omitempty"`
	// Labels of the group's nodes. Labels under kubernetes.io and k8s.io are the kubelet's own.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="spec.nodeGroups[].labels: keys must be qualified names"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.contains('kubernetes.io/') && !k.contains('k8s.io/'))",message="spec.nodeGroups[].labels: keys under kubernetes.io and k8s.io are reserved"
	Labels map[string]LabelValue `json:"labels,omitempty"`
	// Taints of the group's nodes.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Taints []Taint `json:"taints,omitempty"`
}

// LabelValue is the value of a node label.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type LabelValue string

// GPU is one device passed through to a node.
type GPU struct {
	// DeviceName as KubeVirt's permittedHostDevices names it (nvidia.com/GA102GL_A10).
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	DeviceName string `json:"deviceName"`
}

// Taint is a node taint.
type Taint struct {
	// Key of the taint.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Key string `json:"key"`
	// Value of the taint.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
	Value string `json:"value,omitempty"`
	// Effect of the taint.
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	Effect string `json:"effect"`
}

// Addons are components installed inside the cluster.
type Addons struct {
	// Ingress installs an ingress controller.
	// +optional
	Ingress bool `json:"ingress,omitempty"`
	// Monitoring installs monitoring agents.
	// +optional
	Monitoring bool `json:"monitoring,omitempty"`
}

// LocalSecretReference names a Secret in the object's namespace.
type LocalSecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// KubernetesClusterStatus is what the cluster-controller observed.
type KubernetesClusterStatus struct {
	// ObservedGeneration is the generation last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled and the domain conditions (InfrastructureReady,
	// ControlPlaneReady, WorkersReady).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Version is the Kubernetes version the control plane runs (v1.37.2).
	// +optional
	Version string `json:"version,omitempty"`
	// Endpoint is the URL of the cluster's API server.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// KubeconfigSecretName is the Secret holding the admin kubeconfig.
	// +optional
	KubeconfigSecretName string `json:"kubeconfigSecretName,omitempty"`
	// NodeGroups are the machines of each node group.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	NodeGroups []NodeGroupStatus `json:"nodeGroups,omitempty"`
}

// NodeGroupStatus counts the machines of a node group, as its MachineDeployment reports them.
type NodeGroupStatus struct {
	// +kubebuilder:validation:MaxLength=32
	Name string `json:"name"`
	// Desired is the number of machines the group should have now.
	Desired int32 `json:"desired"`
	// Replicas is the number of machines that exist.
	Replicas int32 `json:"replicas"`
	// Ready is the number of machines whose node is ready.
	Ready int32 `json:"ready"`
}

// GetConditions returns the conditions.
func (c *KubernetesCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the conditions.
func (c *KubernetesCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// GetObservedGeneration returns the generation last acted upon.
func (c *KubernetesCluster) GetObservedGeneration() int64 { return c.Status.ObservedGeneration }

// SetObservedGeneration records the generation acted upon.
func (c *KubernetesCluster) SetObservedGeneration(g int64) { c.Status.ObservedGeneration = g }

// KubeconfigSecretName is the Secret that receives the cluster's admin kubeconfig.
func (c *KubernetesCluster) KubeconfigSecretName() string {
	if c.Spec.KubeconfigSecretRef != nil && c.Spec.KubeconfigSecretRef.Name != "" {
		return c.Spec.KubeconfigSecretRef.Name
	}
	return c.Name + "-admin-kubeconfig"
}

// +kubebuilder:object:root=true

// KubernetesClusterList is a list of KubernetesClusters.
type KubernetesClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubernetesCluster `json:"items"`
}
