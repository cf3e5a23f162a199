package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

// The cluster's infrastructure controllers: per cluster, a cloud-controller-manager (LoadBalancer
// Services of the customer's cluster become Services of the tenant's namespace), the KubeVirt CSI
// controller (the customer's volumes become DataVolumes hot-plugged into the worker VMs) and
// cluster-autoscaler (the node groups' MachineDeployments between their minimum and maximum).
//
// Each acts on two clusters: the customer's, with Cluster API's admin kubeconfig, and the
// management cluster's tenant namespace, as a ServiceAccount bound there to InfraClusterRole. They
// hold more than the tenant's admins may (VMs, disks, machines), and those admins can exec into
// pods and mount ServiceAccounts of their own namespace; so they run in the platform's
// InfraNamespace, which tenants cannot reach, and nothing of them is delivered inside the
// customer's cluster.

// InfraClusterRole is the ClusterRole, shipped by the chart, that each cluster's infrastructure
// ServiceAccount is bound to in the cluster's namespace (and nowhere else).
const InfraClusterRole = "flotilla-cluster-infra"

// InfraImages are the container images of the infrastructure controllers.
type InfraImages struct {
	CloudController string
	CSIDriver       string
	CSIProvisioner  string
	CSIAttacher     string
	CSIResizer      string
	// Autoscaler is cluster-autoscaler's image for a minor version AutoscalerByMinor does not name.
	Autoscaler string
	// AutoscalerByMinor is cluster-autoscaler's image by the customer cluster's minor version
	// ("1.37"): its releases follow Kubernetes', and each is made for its own minor.
	AutoscalerByMinor map[string]string
}

// autoscaler is cluster-autoscaler's image for a cluster of minor version minor.
func (i InfraImages) autoscaler(minor string) string {
	if image, ok := i.AutoscalerByMinor[minor]; ok {
		return image
	}
	return i.Autoscaler
}

// The infrastructure controllers, by the suffix of their Deployment's name.
const (
	CloudControllerSuffix = "ccm"
	CSIControllerSuffix   = "csi"
	AutoscalerSuffix      = "autoscaler"
)

// InfraControllers are the Deployments' suffixes, the autoscaler first: it is deleted first, so
// that nothing scales a cluster being deleted.
var InfraControllers = []string{AutoscalerSuffix, CloudControllerSuffix, CSIControllerSuffix}

// Kinds written into the infrastructure namespace, and the RoleBinding in the tenant's.
var (
	DeploymentGVK     = appsv1.SchemeGroupVersion.WithKind("Deployment")
	ServiceAccountGVK = corev1.SchemeGroupVersion.WithKind("ServiceAccount")
	ConfigMapGVK      = corev1.SchemeGroupVersion.WithKind("ConfigMap")
	RoleBindingGVK    = rbacv1.SchemeGroupVersion.WithKind("RoleBinding")
)

// InfraKinds are the kinds of the infrastructure namespace a cluster owns (besides its
// kubeconfig's copy, a Secret).
var InfraKinds = []schema.GroupVersionKind{DeploymentGVK, ServiceAccountGVK, ConfigMapGVK}

// InfraName is the stem of the names of a cluster's objects in the infrastructure namespace: one
// namespace holds every tenant's clusters, so the name is derived from namespace and name (the
// labels say both in full).
func InfraName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return "kc-" + hex.EncodeToString(sum[:])[:12]
}

// InfraKubeconfigSecret is the copy, in the infrastructure namespace, of the cluster's admin
// kubeconfig (key "value", as Cluster API writes it).
func InfraKubeconfigSecret(namespace, name string) string {
	return InfraName(namespace, name) + "-kubeconfig"
}

// InfraBindingName is the RoleBinding, in the cluster's namespace, of its infrastructure identity.
func InfraBindingName(name string) string { return name + "-infra" }

// InfraMeta is the metadata of a cluster's object in the infrastructure namespace: no owner
// reference can cross namespaces, so its labels name the cluster and its annotation the
// cluster's UID, which alone makes the object the cluster's.
func InfraMeta(kc *clusterapi.KubernetesCluster, infraNamespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: infraNamespace,
		Labels: map[string]string{
			clusterapi.LabelCluster: kc.Name, clusterapi.LabelClusterNamespace: kc.Namespace,
			"app.kubernetes.io/managed-by": "cluster-controller",
		},
		Annotations: map[string]string{clusterapi.AnnotationOwner: string(kc.UID)},
	}
}

// cloudConfig is the kubevirt cloud-controller-manager's configuration: where the cluster's VMs
// and Services live. No kubeconfig: the in-cluster identity is the infrastructure's.
type cloudConfig struct {
	Namespace    string            `json:"namespace"`
	InfraLabels  map[string]string `json:"infraLabels"`
	LoadBalancer struct {
		Enabled              bool `json:"enabled"`
		CreationPollInterval int  `json:"creationPollInterval"`
	} `json:"loadBalancer"`
	InstancesV2 struct {
		Enabled bool `json:"enabled"`
	} `json:"instancesV2"`
}

// InfraLabels are the labels the cluster's cloud controllers put on what they make in its
// namespace: the CCM on its load balancers' Services (its cloud-config's infraLabels), the CSI
// controller on the DataVolumes of the customer's volumes (CDI copies them to their claims). The
// cluster's name and UID, by which its deletion finds them, and its app's release, by which the
// usage-api counts the volumes as the app's and the apps API applies the app's volume policy.
func InfraLabels(kc *clusterapi.KubernetesCluster) map[string]string {
	return usageLabels(kc, map[string]string{clusterv1.ClusterNameLabel: kc.Name, clusterapi.LabelClusterUID: string(kc.UID)})
}

// labelList is labels as the CSI driver's flag takes them: name=value pairs, separated by commas,
// in key order. Label values hold no comma or equals sign.
func labelList(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return strings.Join(pairs, ",")
}

// kubeconfigMount is where the infrastructure controllers find the customer's kubeconfig.
const kubeconfigMount = "/etc/kubernetes/kubeconfig"

// infra are the cluster's objects: its ServiceAccount, cloud-config and controllers in the
// infrastructure namespace, and the RoleBinding of that ServiceAccount in the cluster's namespace.
// Every value from the tenant (namespace, names) is a field or an argument, never text parsed.
func infra(kc *clusterapi.KubernetesCluster, o Options) ([]runtime.Object, error) {
	ns, stem := o.InfraNamespace, InfraName(kc.Namespace, kc.Name)
	var cfg cloudConfig
	cfg.Namespace = kc.Namespace
	cfg.InfraLabels = InfraLabels(kc)
	cfg.LoadBalancer.Enabled, cfg.LoadBalancer.CreationPollInterval = true, 5
	cfg.InstancesV2.Enabled = true
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	kubeconfig := "--kubeconfig=" + kubeconfigMount + "/value"
	objs := []runtime.Object{
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: InfraMeta(kc, ns, stem),
		},
		&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: InfraMeta(kc, ns, stem+"-cloud-config"),
			Data:       map[string]string{"cloud-config": string(b)},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: meta(kc, InfraBindingName(kc.Name), nil),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: InfraClusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: stem, Namespace: ns}},
		},
		infraDeployment(kc, o, CloudControllerSuffix, []corev1.Container{{
			Name: "cloud-controller-manager", Image: o.Images.CloudController,
			Args: []string{"--cloud-provider=kubevirt", "--cloud-config=/etc/cloud/cloud-config", kubeconfig,
				"--authentication-skip-lookup=true", "--cluster-name=" + kc.Name, "--leader-elect=false"},
		}}, corev1.Volume{Name: "cloud-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: stem + "-cloud-config"}}}}),
		infraDeployment(kc, o, CSIControllerSuffix, []corev1.Container{{
			Name: "csi-driver", Image: o.Images.CSIDriver,
			Args: []string{"--endpoint=unix:///csi/csi.sock", "--infra-cluster-namespace=" + kc.Namespace,
				"--infra-cluster-labels=" + labelList(InfraLabels(kc)),
				"--tenant-cluster-kubeconfig=" + kubeconfigMount + "/value",
				"--run-node-service=false", "--run-controller-service=true"},
		}, {
			Name: "csi-provisioner", Image: o.Images.CSIProvisioner,
			Args: []string{"--csi-address=/csi/csi.sock", kubeconfig, "--default-fstype=ext4", "--timeout=3m"},
		}, {
			Name: "csi-attacher", Image: o.Images.CSIAttacher,
			Args: []string{"--csi-address=/csi/csi.sock", kubeconfig, "--timeout=3m"},
		}, {
			// A claim of the customer's grown: the driver grows its DataVolume's claim, under the
			// tenant's quota; the node plugin then grows the filesystem.
			Name: "csi-resizer", Image: o.Images.CSIResizer,
			Args: []string{"--csi-address=/csi/csi.sock", kubeconfig, "--timeout=3m", "--handle-volume-inuse-error=false"},
		}}, corev1.Volume{Name: "socket-dir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}),
		// The management cluster is the in-cluster identity (no --cloud-config); the node groups
		// are discovered by the cluster-autoscaler annotations of the MachineDeployments.
		infraDeployment(kc, o, AutoscalerSuffix, []corev1.Container{{
			Name: "cluster-autoscaler", Image: o.Images.autoscaler(kc.Spec.Version),
			Args: []string{"--cloud-provider=clusterapi", kubeconfig, "--clusterapi-cloud-config-authoritative",
				"--node-group-auto-discovery=clusterapi:namespace=" + kc.Namespace + ",clusterName=" + kc.Name,
				"--leader-elect=false"},
		}}),
	}
	return objs, nil
}

// infraDeployment runs containers as the cluster's infrastructure ServiceAccount, with the
// customer's kubeconfig mounted (and volumes mounted at their containers' conventional paths).
func infraDeployment(kc *clusterapi.KubernetesCluster, o Options, suffix string, containers []corev1.Container, volumes ...corev1.Volume) *appsv1.Deployment {
	stem := InfraName(kc.Namespace, kc.Name)
	m := InfraMeta(kc, o.InfraNamespace, stem+"-"+suffix)
	selector := map[string]string{"app.kubernetes.io/name": suffix, "app.kubernetes.io/instance": stem}
	podLabels := map[string]string{clusterapi.LabelCluster: kc.Name, clusterapi.LabelClusterNamespace: kc.Namespace}
	for k, v := range selector {
		podLabels[k] = v
	}
	mounts := map[string]string{"kubeconfig": kubeconfigMount, "cloud-config": "/etc/cloud", "socket-dir": "/csi"}
	volumes = append([]corev1.Volume{{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: InfraKubeconfigSecret(kc.Namespace, kc.Name)}}}}, volumes...)
	for i := range containers {
		c := &containers[i]
		for _, v := range volumes {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: mounts[v.Name], ReadOnly: v.Name != "socket-dir"})
		}
		c.SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: m,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: stem,
					SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers:         containers,
					Volumes:            volumes,
				},
			},
		},
	}
}
