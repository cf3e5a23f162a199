package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime/schema"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// The kinds a KubernetesCluster owns, by group, version and kind.
var (
	ClusterGVK               = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}
	MachineDeploymentGVK     = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}
	MachineHealthCheckGVK    = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineHealthCheck"}
	KubeadmConfigTemplateGVK = schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplate"}
	KubevirtClusterGVK       = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "KubevirtCluster"}
	KubevirtMachineTmplGVK   = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "KubevirtMachineTemplate"}
	// MachineSetGVK is not owned: Cluster API makes a MachineSet per revision of a MachineDeployment.
	MachineSetGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineSet"}
	// KamajiControlPlaneGVK is the control-plane provider's kind (clastix/cluster-api-control-plane-provider-kamaji
	// v0.20.0, whose CRD is kept in test/crds/kamaji); written unstructured, its Go module is not served.
	KamajiControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha2", Kind: "KamajiControlPlane"}
	// The add-ons: Flux's HelmRepository and HelmRelease, and Cluster API's ClusterResourceSet that
	// grants the add-ons' identity inside the customer's cluster.
	HelmRepositoryGVK     = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "HelmRepository"}
	HelmReleaseGVK        = schema.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"}
	ClusterResourceSetGVK = schema.GroupVersionKind{Group: "addons.cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterResourceSet"}
)

// SchedulingClassGVK is the storage-controller's placement kind, which a cluster may name.
var SchedulingClassGVK = storagepolicyv1.GroupVersion.WithKind("SchedulingClass")

// DataVolumeGVK is CDI's DataVolume: the CSI controller makes one per volume of the customer's.
var DataVolumeGVK = schema.GroupVersionKind{Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataVolume"}

// AddonsName names the add-ons' HelmRepository, ClusterResourceSet and its Secret of cluster name.
func AddonsName(name string) string { return name + "-addons" }

// AddonReleaseName is the HelmRelease of add-on addon of cluster name.
func AddonReleaseName(name, addon string) string { return name + "-addon-" + addon }

// AddonsIdentity is the ServiceAccount name helm-controller impersonates inside the customer's
// cluster when it installs an add-on (system:serviceaccount:<namespace>:flotilla-addons): the
// ClusterResourceSet binds it there, and it exists nowhere in the management cluster.
const AddonsIdentity = "flotilla-addons"

// AdminKubeconfigSecret is Cluster API's admin kubeconfig of cluster name (key value), written by
// the control-plane provider.
func AdminKubeconfigSecret(name string) string { return name + "-kubeconfig" }

// MachineDeploymentName is the MachineDeployment of node group group of cluster name.
func MachineDeploymentName(name, group string) string { return name + "-" + group }

// templateName names a template after its content: Cluster API templates are not changed in
// place; a changed template is a new one, and the MachineDeployment rolls to it.
func templateName(name, group string, spec any) string {
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	return name + "-" + group + "-" + hex.EncodeToString(sum[:])[:8]
}

// ControlPlaneName is the KamajiControlPlane of cluster name. Kamaji names the TenantControlPlane
// after it and writes its own admin kubeconfig as <TenantControlPlane>-admin-kubeconfig: naming it
// after the cluster would collide with the customer's kubeconfig Secret, <name>-admin-kubeconfig.
func ControlPlaneName(name string) string { return name + "-control-plane" }
