package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	capkv1 "sigs.k8s.io/cluster-api-provider-kubevirt/api/v1alpha1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// Options are the platform's choices, the same for every cluster.
type Options struct {
	// PatchVersions maps a minor version ("1.37") to the release the platform runs ("v1.37.2");
	// a minor missing from it runs v1.<minor>.0.
	PatchVersions map[string]string
	// NodeImage is the container-disk image of the worker nodes' root disk, without its tag; the
	// tag is the Kubernetes release.
	NodeImage string
	// PodCIDR and ServiceCIDR are the customer cluster's networks.
	PodCIDR, ServiceCIDR string
	// AddonsRepository is the URL of the Helm repository holding the add-on charts, one chart per
	// add-on named after it (cni, csi-node, ingress, monitoring).
	AddonsRepository string
	// BaseAddons are the add-ons every cluster gets, whatever its spec says: the CNI, without
	// which no node becomes Ready, and the KubeVirt CSI node plugin, without which no volume of
	// the platform attaches. Empty for a platform whose node image carries them.
	BaseAddons []string
	// InfraNamespace is the platform's namespace where each cluster's cloud-controller-manager,
	// CSI controller and cluster-autoscaler run (infra.go); empty runs none.
	InfraNamespace string
	// Images are the infrastructure controllers' images.
	Images InfraImages
}

// DefaultOptions are the options `cluster-controller` starts with unless flags say otherwise.
func DefaultOptions() Options {
	return Options{
		PatchVersions: map[string]string{"1.37": "v1.37.2"},
		NodeImage:     "ghcr.io/flotilla-dev/kubevirt-node",
		PodCIDR:       "10.244.0.0/16",
		ServiceCIDR:   "10.96.0.0/12",
		// The platform's chart server (deploy/catalog/source.yaml serves the catalog beside it).
		AddonsRepository: "http://charts.flotilla-system.svc/addons/",
		BaseAddons:       []string{"cni", "csi-node"},
		Images: InfraImages{
			CloudController: "quay.io/kubevirt/kubevirt-cloud-controller-manager:v0.5.1",
			CSIDriver:       "quay.io/kubevirt/kubevirt-csi-driver:v0.4.1",
			CSIProvisioner:  "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0",
			CSIAttacher:     "registry.k8s.io/sig-storage/csi-attacher:v4.8.1",
			CSIResizer:      "registry.k8s.io/sig-storage/csi-resizer:v1.13.1",
			Autoscaler:      "registry.k8s.io/autoscaling/cluster-autoscaler:v1.37.0",
		},
	}
}

// Release is the Kubernetes release of minor version minor ("1.37" → "v1.37.2").
func (o Options) Release(minor string) string {
	if v, ok := o.PatchVersions[minor]; ok {
		return v
	}
	return "v" + minor + ".0"
}

// Inputs is what the desired objects depend on besides the spec: what the reconciler read.
type Inputs struct {
	Cluster *clusterapi.KubernetesCluster
	// DataStore is the Kamaji DataStore of the tenant's etcd.
	DataStore string
	// Replicas are the node groups' current replicas (MachineDeployment spec.replicas, which the
	// cluster autoscaler moves between min and max); a group missing here starts at its minimum.
	Replicas map[string]int32
	// WorkerVersion is the release the workers run: the control plane's until it has finished
	// upgrading, so that workers never run ahead of the control plane.
	WorkerVersion string
}

// instanceTypes are the platform's node sizes.
var instanceTypes = map[string]struct {
	cores  uint32
	memory string
}{
	"small":  {2, "4Gi"},
	"medium": {4, "8Gi"},
	"large":  {8, "16Gi"},
}

// Desired returns every object of the cluster in the order they are applied: infrastructure and
// control plane first, then per node group its templates before the MachineDeployment naming them.
// Objects of one Stage may be applied together.
func Desired(in Inputs, o Options) ([]*unstructured.Unstructured, error) {
	kc := in.Cluster
	objs := []runtime.Object{kubevirtCluster(kc), cluster(kc, o)}
	objs = append(objs, controlPlane(kc, in.DataStore, o))
	for i := range kc.Spec.NodeGroups {
		g := &kc.Spec.NodeGroups[i]
		boot := kubeadmConfigTemplate(kc, g)
		infra, err := machineTemplate(kc, g, in.WorkerVersion, o)
		if err != nil {
			return nil, err
		}
		replicas, ok := in.Replicas[g.Name]
		if !ok {
			replicas = g.MinReplicas
		}
		objs = append(objs, boot, infra, machineDeployment(kc, g, min(max(replicas, g.MinReplicas), g.MaxReplicas), in.WorkerVersion, boot.Name, infra.Name))
	}
	objs = append(objs, healthCheck(kc))
	if o.InfraNamespace != "" {
		more, err := infra(kc, o)
		if err != nil {
			return nil, err
		}
		objs = append(objs, more...)
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return append(out, addons(kc, o)...), nil
}

// meta is the metadata of every object of the cluster: its name, the cluster's labels and a
// controller reference to the KubernetesCluster.
func meta(kc *clusterapi.KubernetesCluster, name string, extra map[string]string) metav1.ObjectMeta {
	labels := map[string]string{clusterapi.LabelCluster: kc.Name, clusterv1.ClusterNameLabel: kc.Name}
	for k, v := range extra {
		labels[k] = v
	}
	return metav1.ObjectMeta{
		Name: name, Namespace: kc.Namespace, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(kc, clusterapi.GroupVersion.WithKind("KubernetesCluster"))},
	}
}

func cluster(kc *clusterapi.KubernetesCluster, o Options) *clusterv1.Cluster {
	return &clusterv1.Cluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: ClusterGVK.GroupVersion().String(), Kind: ClusterGVK.Kind},
		ObjectMeta: meta(kc, kc.Name, nil),
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{o.PodCIDR}},
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{o.ServiceCIDR}},
			},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: KamajiControlPlaneGVK.Group, Kind: KamajiControlPlaneGVK.Kind, Name: ControlPlaneName(kc.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: KubevirtClusterGVK.Group, Kind: KubevirtClusterGVK.Kind, Name: kc.Name},
		},
	}
}

// kubevirtCluster is the infrastructure cluster. Its control-plane endpoint is Kamaji's (the
// provider patches it in), so it is marked externally managed: CAPK makes no load balancer.
func kubevirtCluster(kc *clusterapi.KubernetesCluster) *capkv1.KubevirtCluster {
	m := meta(kc, kc.Name, nil)
	m.Annotations = map[string]string{clusterv1.ManagedByAnnotation: "kamaji"}
	return &capkv1.KubevirtCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: KubevirtClusterGVK.GroupVersion().String(), Kind: KubevirtClusterGVK.Kind},
		ObjectMeta: m,
	}
}

// controlPlane is the KamajiControlPlane: the tenant's etcd (a Kamaji DataStore) under a key prefix
// of the cluster's own.
func controlPlane(kc *clusterapi.KubernetesCluster, dataStore string, o Options) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(KamajiControlPlaneGVK)
	m := meta(kc, ControlPlaneName(kc.Name), nil)
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	u.SetLabels(m.Labels)
	u.SetOwnerReferences(m.OwnerReferences)
	// Kamaji labels the control plane's pods with these.
	podLabels := map[string]any{}
	for k, v := range usageLabels(kc, map[string]string{clusterapi.LabelCluster: kc.Name}) {
		podLabels[k] = v
	}
	podMetadata := map[string]any{"labels": podLabels}
	if c := placement(kc); c != nil {
		podMetadata["annotations"] = map[string]any{storagepolicyv1.AnnotationSchedulingClass: c[storagepolicyv1.AnnotationSchedulingClass]}
	}
	spec := map[string]any{
		"version":         o.Release(kc.Spec.Version),
		"replicas":        int64(kc.Spec.ControlPlane.Replicas),
		"dataStoreName":   dataStore,
		"dataStoreSchema": DataStoreSchema(kc),
		"addons":          map[string]any{"coreDNS": map[string]any{}, "kubeProxy": map[string]any{}},
		"deployment":      map[string]any{"podAdditionalMetadata": podMetadata},
	}
	if r := kc.Spec.ControlPlane.Resources; r != nil {
		req := map[string]any{}
		if r.CPU != nil {
			req["cpu"] = r.CPU.String()
		}
		if r.Memory != nil {
			req["memory"] = r.Memory.String()
		}
		spec["apiServer"] = map[string]any{"resources": map[string]any{"requests": req}}
	}
	u.Object["spec"] = spec
	return u
}

// placement is the annotation by which the storage-controller places a pod of the cluster (the
// control plane's, a worker VM's) by the spec's scheduling class; nil when it names none.
func placement(kc *clusterapi.KubernetesCluster) map[string]string {
	if kc.Spec.SchedulingClass == "" {
		return nil
	}
	return map[string]string{storagepolicyv1.AnnotationSchedulingClass: kc.Spec.SchedulingClass}
}

// DataStoreSchema is the etcd key prefix of the cluster's state: unique per namespace and name
// (a Kubernetes name has no underscore, so no two clusters share one).
func DataStoreSchema(kc *clusterapi.KubernetesCluster) string {
	return kc.Namespace + "_" + kc.Name
}

// groupLabels select a node group's machines; they carry Cluster API's cluster-name label too, as
// its defaulting webhook would add (the objects written here do not rely on that webhook).
func groupLabels(kc *clusterapi.KubernetesCluster, g *clusterapi.NodeGroup) map[string]string {
	return map[string]string{clusterapi.LabelCluster: kc.Name, clusterapi.LabelNodeGroup: g.Name, clusterv1.ClusterNameLabel: kc.Name}
}

// labelInstance is the Helm release that installed an object (the app whose release rendered the
// KubernetesCluster). The usage-api attributes pods and claims by it.
const labelInstance = "app.kubernetes.io/instance"

// usageLabels are the labels of what runs and is stored in the tenant's namespace for the cluster
// (the control plane's pods, the workers' VM pods and root disks): labels (a fresh map of the
// caller's, extended in place) and its app's release, so that their usage counts as the app's.
func usageLabels(kc *clusterapi.KubernetesCluster, labels map[string]string) map[string]string {
	if release := kc.Labels[labelInstance]; release != "" {
		labels[labelInstance] = release
	}
	return labels
}

// rootDiskLabels are the labels of a worker's root disk of group g.
func rootDiskLabels(kc *clusterapi.KubernetesCluster, g *clusterapi.NodeGroup) map[string]string {
	labels := usageLabels(kc, groupLabels(kc, g))
	labels[fmeta.LabelVolumePolicy] = fmeta.VolumePolicyDelete
	return labels
}

func kubeadmConfigTemplate(kc *clusterapi.KubernetesCluster, g *clusterapi.NodeGroup) *bootstrapv1.KubeadmConfigTemplate {
	// The kubelet registers with an external cloud provider: the KubeVirt CCM sets providerID
	// and addresses.
	args := []bootstrapv1.Arg{{Name: "cloud-provider", Value: ptr.To("external")}}
	if len(g.Labels) > 0 {
		keys := make([]string, 0, len(g.Labels))
		for k := range g.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pairs := make([]string, 0, len(keys))
		for _, k := range keys {
			pairs = append(pairs, k+"="+string(g.Labels[k]))
		}
		args = append(args, bootstrapv1.Arg{Name: "node-labels", Value: ptr.To(strings.Join(pairs, ","))})
	}
	reg := bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: args}
	if len(g.Taints) > 0 {
		taints := make([]corev1.Taint, 0, len(g.Taints))
		for _, t := range g.Taints {
			taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
		reg.Taints = &taints
	}
	spec := bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: bootstrapv1.KubeadmConfigSpec{
		JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: reg},
	}}}
	return &bootstrapv1.KubeadmConfigTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: KubeadmConfigTemplateGVK.GroupVersion().String(), Kind: KubeadmConfigTemplateGVK.Kind},
		ObjectMeta: meta(kc, templateName(kc.Name, g.Name, spec), groupLabels(kc, g)),
		Spec:       spec,
	}
}

// machineTemplate is the VM of one node of group g: its size, root disk (imported from the node
// image of the workers' release into the group's storage class) and GPUs.
func machineTemplate(kc *clusterapi.KubernetesCluster, g *clusterapi.NodeGroup, release string, o Options) (*capkv1.KubevirtMachineTemplate, error) {
	cores, memory := uint32(0), resource.Quantity{}
	if it, ok := instanceTypes[g.InstanceType]; ok {
		cores, memory = it.cores, resource.MustParse(it.memory)
	} else if g.CPU != nil && g.Memory != nil {
		cores, memory = uint32(*g.CPU), *g.Memory
	} else {
		return nil, fmt.Errorf("spec.nodeGroups[%s]: neither instanceType nor cpu and memory", g.Name)
	}
	disk := resource.MustParse("20Gi")
	if g.DiskSize != nil {
		disk = *g.DiskSize
	}
	storage := &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: disk}}}
	if g.StorageClass != "" {
		storage.StorageClassName = ptr.To(g.StorageClass)
	}
	gpus := make([]kubevirtv1.GPU, 0, len(g.GPUs))
	for i, gpu := range g.GPUs {
		gpus = append(gpus, kubevirtv1.GPU{Name: "gpu" + strconv.Itoa(i), DeviceName: gpu.DeviceName})
	}
	vm := kubevirtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
		DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{{
			// CDI copies the DataVolume's labels to its claim. A worker is replaceable and its disk
			// holds nothing of the customer's: the claim goes with its VM even when the app's
			// volume policy keeps the app's volumes.
			ObjectMeta: metav1.ObjectMeta{Name: "root", Labels: rootDiskLabels(kc, g)},
			Spec: cdiv1.DataVolumeSpec{
				Source:  &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + o.NodeImage + ":" + release)}},
				Storage: storage,
			},
		}},
		// KubeVirt labels the VM's pod with the instance's labels, and annotates it with its annotations.
		Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: usageLabels(kc, groupLabels(kc, g)), Annotations: placement(kc)},
			Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{
					CPU:    &kubevirtv1.CPU{Cores: cores},
					Memory: &kubevirtv1.Memory{Guest: &memory},
					Devices: kubevirtv1.Devices{
						Disks: []kubevirtv1.Disk{{Name: "root", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}},
						GPUs:  gpus,
					},
				},
				Volumes: []kubevirtv1.Volume{{Name: "root", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "root"}}}},
			},
		},
	}
	spec := capkv1.KubevirtMachineTemplateSpec{Template: capkv1.KubevirtMachineTemplateResource{Spec: capkv1.KubevirtMachineSpec{
		VirtualMachineTemplate: capkv1.VirtualMachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: groupLabels(kc, g)}, Spec: vm},
		BootstrapCheckSpec:     capkv1.VirtualMachineBootstrapCheckSpec{CheckStrategy: "ssh"},
	}}}
	return &capkv1.KubevirtMachineTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: KubevirtMachineTmplGVK.GroupVersion().String(), Kind: KubevirtMachineTmplGVK.Kind},
		ObjectMeta: meta(kc, templateName(kc.Name, g.Name, spec), groupLabels(kc, g)),
		Spec:       spec,
	}, nil
}

// machineDeployment is node group g: replicas between its bounds (the cluster autoscaler reads the
// bounds from the annotations and moves replicas), machines of the two templates.
func machineDeployment(kc *clusterapi.KubernetesCluster, g *clusterapi.NodeGroup, replicas int32, release, bootstrap, infra string) *clusterv1.MachineDeployment {
	m := meta(kc, MachineDeploymentName(kc.Name, g.Name), groupLabels(kc, g))
	m.Annotations = map[string]string{
		clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(int(g.MinReplicas)),
		clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(int(g.MaxReplicas)),
	}
	return &clusterv1.MachineDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: MachineDeploymentGVK.GroupVersion().String(), Kind: MachineDeploymentGVK.Kind},
		ObjectMeta: m,
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: kc.Name,
			Replicas:    ptr.To(replicas),
			// Replace a node by first adding its successor: capacity never drops during a rollout.
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))},
			}},
			Selector: metav1.LabelSelector{MatchLabels: groupLabels(kc, g)},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: groupLabels(kc, g)},
				Spec: clusterv1.MachineSpec{
					ClusterName: kc.Name,
					Version:     release,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: KubeadmConfigTemplateGVK.Group, Kind: KubeadmConfigTemplateGVK.Kind, Name: bootstrap}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: KubevirtMachineTmplGVK.Group, Kind: KubevirtMachineTmplGVK.Kind, Name: infra},
				},
			},
		},
	}
}

// healthCheck replaces a worker whose node stays unready: workers are cattle.
func healthCheck(kc *clusterapi.KubernetesCluster) *clusterv1.MachineHealthCheck {
	return &clusterv1.MachineHealthCheck{
		TypeMeta:   metav1.TypeMeta{APIVersion: MachineHealthCheckGVK.GroupVersion().String(), Kind: MachineHealthCheckGVK.Kind},
		ObjectMeta: meta(kc, kc.Name+"-workers", nil),
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: kc.Name,
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{clusterapi.LabelCluster: kc.Name},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: clusterapi.LabelNodeGroup, Operator: metav1.LabelSelectorOpExists}}},
			Checks: clusterv1.MachineHealthCheckChecks{
				NodeStartupTimeoutSeconds: ptr.To[int32](600),
				UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](300)},
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](300)},
				},
			},
		},
	}
}

// toUnstructured converts a typed object to the form it is applied in, dropping the nulls the
// typed zero values leave (creationTimestamp: null and the like), which apply would send as
// "remove this field".
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	pruneNulls(m)
	// Status belongs to the providers (and apply ignores it on the main resource: keeping it would
	// make a converged object look different from what is applied).
	delete(m, "status")
	return &unstructured.Unstructured{Object: m}, nil
}

func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			pruneNulls(e)
			if em, ok := e.(map[string]any); ok && len(em) == 0 && k == "metadata" {
				delete(t, k)
			}
		}
	case []any:
		for _, e := range t {
			pruneNulls(e)
		}
	}
}

// Stage is when obj may be applied: 0 with the others of stage 0, 1 once those exist. A
// MachineDeployment goes after the templates it names (Cluster API would make machines from a
// template it cannot find), a HelmRelease after its HelmRepository; the other objects refer to one
// another by name and wait for one another.
func Stage(obj *unstructured.Unstructured) int {
	switch obj.GroupVersionKind() {
	case MachineDeploymentGVK, HelmReleaseGVK:
		return 1
	}
	return 0
}
