package cluster

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

func makeCluster() *clusterapi.KubernetesCluster {
	return &clusterapi.KubernetesCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "k8s-prod", Namespace: "acme", UID: types.UID("uid-1")},
		Spec: clusterapi.KubernetesClusterSpec{
			Version:      "1.37",
			ControlPlane: clusterapi.ControlPlane{Replicas: 2},
			NodeGroups: []clusterapi.NodeGroup{
				{Name: "default", MinReplicas: 1, MaxReplicas: 3, InstanceType: "medium"},
				{Name: "gpu", MinReplicas: 0, MaxReplicas: 2, InstanceType: "large",
					Labels: map[string]clusterapi.LabelValue{"b": "2", "a": "1"},
					Taints: []clusterapi.Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}}},
			},
		},
	}
}

func desired(t *testing.T, in Inputs) map[string]*unstructured.Unstructured {
	t.Helper()
	return desiredWith(t, in, DefaultOptions())
}

func desiredWith(t *testing.T, in Inputs, o Options) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := Desired(in, o)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKey[o.GetKind()+"/"+o.GetName()] = o
	}
	return byKey
}

func str(t *testing.T, u *unstructured.Unstructured, path ...string) string {
	t.Helper()
	v, _, err := unstructured.NestedString(u.Object, path...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEveryReferenceResolvesToADesiredObject(t *testing.T) {
	objs := desired(t, Inputs{Cluster: makeCluster(), DataStore: "flotilla-acme", WorkerVersion: "v1.37.2"})
	c := objs["Cluster/k8s-prod"]
	if c == nil {
		t.Fatal("no Cluster")
	}
	for _, ref := range []string{"controlPlaneRef", "infrastructureRef"} {
		kind, name := str(t, c, "spec", ref, "kind"), str(t, c, "spec", ref, "name")
		if objs[kind+"/"+name] == nil {
			t.Errorf("Cluster spec.%s names %s/%s, which is not built", ref, kind, name)
		}
	}
	mds := 0
	for _, o := range objs {
		if o.GetKind() != "MachineDeployment" {
			continue
		}
		mds++
		for _, ref := range [][]string{{"bootstrap", "configRef"}, {"infrastructureRef"}} {
			path := append([]string{"spec", "template", "spec"}, ref...)
			kind, name := str(t, o, append(path, "kind")...), str(t, o, append(path, "name")...)
			if objs[kind+"/"+name] == nil {
				t.Errorf("%s names %s/%s, which is not built", o.GetName(), kind, name)
			}
		}
		if got := str(t, o, "spec", "clusterName"); got != "k8s-prod" {
			t.Errorf("%s: clusterName %q", o.GetName(), got)
		}
		sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
		tl, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		for k, v := range sel {
			if tl[k] != v {
				t.Errorf("%s: the selector's %s=%s is not on its machines (%v)", o.GetName(), k, v, tl)
			}
		}
	}
	if mds != 2 {
		t.Errorf("%d MachineDeployments, want one per node group", mds)
	}
	for _, o := range objs {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != "uid-1" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%s/%s: owner references %v, want the KubernetesCluster as controller", o.GetKind(), o.GetName(), refs)
		}
		if o.GetLabels()[clusterapi.LabelCluster] != "k8s-prod" || o.GetNamespace() != "acme" {
			t.Errorf("%s/%s: not labelled for its cluster or in the wrong namespace", o.GetKind(), o.GetName())
		}
	}
}

func TestNodeGroupBoundsAndReplicas(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current map[string]int32
		want    int64
	}{
		{"new group starts at its minimum", nil, 1},
		{"the autoscaler's choice is kept", map[string]int32{"default": 2}, 2},
		{"below the minimum is raised", map[string]int32{"default": 0}, 1},
		{"above the maximum is lowered", map[string]int32{"default": 7}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := desired(t, Inputs{Cluster: makeCluster(), Replicas: tc.current, WorkerVersion: "v1.37.2"})["MachineDeployment/k8s-prod-default"]
			got, _, _ := unstructured.NestedInt64(md.Object, "spec", "replicas")
			if got != tc.want {
				t.Errorf("replicas %d, want %d", got, tc.want)
			}
			a := md.GetAnnotations()
			if a["cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"] != "1" || a["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] != "3" {
				t.Errorf("autoscaler annotations %v", a)
			}
		})
	}
}

func TestTemplatesAreRenamedWhenTheyChange(t *testing.T) {
	names := func(kc *clusterapi.KubernetesCluster, version string) (string, string) {
		md := desired(t, Inputs{Cluster: kc, WorkerVersion: version})["MachineDeployment/k8s-prod-gpu"]
		return str(t, md, "spec", "template", "spec", "bootstrap", "configRef", "name"), str(t, md, "spec", "template", "spec", "infrastructureRef", "name")
	}
	boot, infra := names(makeCluster(), "v1.37.2")
	if b, i := names(makeCluster(), "v1.37.2"); b != boot || i != infra {
		t.Error("the same spec gave different template names")
	}
	kc := makeCluster()
	kc.Spec.NodeGroups[1].InstanceType = "small"
	if b, i := names(kc, "v1.37.2"); b != boot || i == infra {
		t.Errorf("a new instance type must give a new machine template only: %s %s", b, i)
	}
	kc = makeCluster()
	kc.Spec.NodeGroups[1].Taints = nil
	if b, _ := names(kc, "v1.37.2"); b == boot {
		t.Error("new taints must give a new bootstrap template")
	}
	if _, i := names(makeCluster(), "v1.38.0"); i == infra {
		t.Error("a new release must give a new machine template (its node image)")
	}
}

func TestControlPlaneAndWorkerVersions(t *testing.T) {
	kc := makeCluster()
	kc.Spec.Version = "1.38"
	objs := desired(t, Inputs{Cluster: kc, DataStore: "flotilla-acme", WorkerVersion: "v1.37.2"})
	kcp := objs["KamajiControlPlane/k8s-prod-control-plane"]
	if got := str(t, kcp, "spec", "version"); got != "v1.38.0" {
		t.Errorf("control plane version %q", got)
	}
	if got := str(t, kcp, "spec", "dataStoreName"); got != "flotilla-acme" {
		t.Errorf("dataStoreName %q", got)
	}
	if got := str(t, kcp, "spec", "dataStoreSchema"); got != "acme_k8s-prod" {
		t.Errorf("dataStoreSchema %q", got)
	}
	if got := str(t, objs["MachineDeployment/k8s-prod-default"], "spec", "template", "spec", "version"); got != "v1.37.2" {
		t.Errorf("workers run %q before the control plane finished upgrading", got)
	}
}

func TestNodeLabelsAndTaints(t *testing.T) {
	objs := desired(t, Inputs{Cluster: makeCluster(), WorkerVersion: "v1.37.2"})
	md := objs["MachineDeployment/k8s-prod-gpu"]
	kct := objs["KubeadmConfigTemplate/"+str(t, md, "spec", "template", "spec", "bootstrap", "configRef", "name")]
	reg, _, _ := unstructured.NestedMap(kct.Object, "spec", "template", "spec", "joinConfiguration", "nodeRegistration")
	args := map[string]string{}
	for _, a := range reg["kubeletExtraArgs"].([]any) {
		m := a.(map[string]any)
		args[m["name"].(string)] = m["value"].(string)
	}
	if args["node-labels"] != "a=1,b=2" || args["cloud-provider"] != "external" {
		t.Errorf("kubelet args %v", args)
	}
	taints := reg["taints"].([]any)
	if len(taints) != 1 || taints[0].(map[string]any)["effect"] != "NoSchedule" {
		t.Errorf("taints %v", taints)
	}
}

func TestNoStatusIsApplied(t *testing.T) {
	for key, o := range desired(t, Inputs{Cluster: makeCluster(), WorkerVersion: "v1.37.2"}) {
		if _, ok := o.Object["status"]; ok {
			t.Errorf("%s carries a status", key)
		}
	}
}

// The MachineDeployment is complete without Cluster API's defaulting webhook: its controller
// refuses an empty rollout strategy ("unexpected deployment strategy type").
func TestMachineDeploymentNeedsNoDefaulting(t *testing.T) {
	md := desired(t, Inputs{Cluster: makeCluster(), WorkerVersion: "v1.37.2"})["MachineDeployment/k8s-prod-default"]
	if got := str(t, md, "spec", "rollout", "strategy", "type"); got != "RollingUpdate" {
		t.Errorf("rollout strategy %q", got)
	}
	sel, _, _ := unstructured.NestedStringMap(md.Object, "spec", "selector", "matchLabels")
	if sel["cluster.x-k8s.io/cluster-name"] != "k8s-prod" {
		t.Errorf("selector %v lacks the cluster-name label", sel)
	}
}

// Kamaji writes <TenantControlPlane>-admin-kubeconfig, and names the TenantControlPlane after the
// KamajiControlPlane: that Secret must not be the customer's (<name>-admin-kubeconfig, which the
// starter catalog exposes to the tenant).
func TestKamajiSecretsDoNotCollideWithTheCustomersKubeconfig(t *testing.T) {
	kc := makeCluster()
	kcp := ""
	for key, o := range desired(t, Inputs{Cluster: kc, WorkerVersion: "v1.37.2"}) {
		if o.GetKind() == "KamajiControlPlane" {
			kcp = o.GetName()
		}
		_ = key
	}
	if kcp+"-admin-kubeconfig" == kc.KubeconfigSecretName() {
		t.Errorf("Kamaji's admin kubeconfig %s-admin-kubeconfig is the customer's Secret", kcp)
	}
}

func TestAddonsAreHelmReleasesIntoTheCustomersCluster(t *testing.T) {
	kc := makeCluster()
	in := Inputs{Cluster: kc, DataStore: "flotilla-acme", WorkerVersion: "v1.37.2"}
	none := DefaultOptions()
	none.BaseAddons = nil
	if objs := desiredWith(t, in, none); objs["HelmRelease/k8s-prod-addon-ingress"] != nil || objs["HelmRepository/k8s-prod-addons"] != nil {
		t.Error("add-on objects without add-ons")
	}
	// The CNI and the CSI node plugin come whatever the spec says.
	if objs := desired(t, in); objs["HelmRelease/k8s-prod-addon-cni"] == nil || objs["HelmRelease/k8s-prod-addon-csi-node"] == nil || objs["HelmRelease/k8s-prod-addon-ingress"] != nil {
		t.Error("the base add-ons are not (alone) installed")
	}
	kc.Spec.Addons = clusterapi.Addons{Ingress: true, Monitoring: true}
	if got := Addons(kc, DefaultOptions()); !slices.Equal(got, []string{"cni", "csi-node", "ingress", "monitoring"}) {
		t.Errorf("Addons: %v", got)
	}
	objs := desired(t, in)
	repo, crs := objs["HelmRepository/k8s-prod-addons"], objs["ClusterResourceSet/k8s-prod-addons"]
	if repo == nil || crs == nil || str(t, repo, "spec", "url") != DefaultOptions().AddonsRepository || str(t, repo, "spec", "type") != "" {
		t.Fatalf("add-on source %v, ClusterResourceSet %v", repo, crs)
	}
	// The release's add-on charts from a registry (deploy/flux points there): an OCI repository.
	fromRegistry := DefaultOptions()
	fromRegistry.AddonsRepository = "oci://mirror.example:5000/flotilla/addons"
	if r := desiredWith(t, in, fromRegistry)["HelmRepository/k8s-prod-addons"]; str(t, r, "spec", "type") != "oci" || str(t, r, "spec", "url") != fromRegistry.AddonsRepository {
		t.Errorf("add-on source from a registry: %v", r)
	}
	for _, a := range []string{"cni", "csi-node", "ingress", "monitoring"} {
		hr := objs["HelmRelease/k8s-prod-addon-"+a]
		if hr == nil {
			t.Fatalf("no HelmRelease of %s", a)
		}
		// Into the customer's API server through Cluster API's admin kubeconfig, as the identity
		// the ClusterResourceSet binds there; the chart from the repository in the same namespace.
		if got := str(t, hr, "spec", "kubeConfig", "secretRef", "name"); got != "k8s-prod-kubeconfig" {
			t.Errorf("%s: kubeConfig.secretRef %q", a, got)
		}
		if str(t, hr, "spec", "serviceAccountName") != AddonsIdentity || str(t, hr, "spec", "chart", "spec", "chart") != a ||
			str(t, hr, "spec", "chart", "spec", "sourceRef", "name") != repo.GetName() || str(t, hr, "spec", "chart", "spec", "sourceRef", "namespace") != "" {
			t.Errorf("%s: %v", a, hr.Object["spec"])
		}
		if hr.GetLabels()[clusterapi.LabelAddon] != a || hr.GetOwnerReferences()[0].UID != kc.UID {
			t.Errorf("%s: labels %v, owners %v", a, hr.GetLabels(), hr.GetOwnerReferences())
		}
		// What the CNI and the CSI node plugin need to know, as values: the networks, and where
		// the cluster's volumes are in the platform (as the CSI controller is told).
		if str(t, hr, "spec", "values", "cluster", "podCIDR") != DefaultOptions().PodCIDR || str(t, hr, "spec", "values", "cluster", "infraNamespace") != "acme" ||
			str(t, hr, "spec", "values", "cluster", "infraLabels", "cluster.x-k8s.io/cluster-name") != "k8s-prod" {
			t.Errorf("%s: values %v", a, hr.Object["spec"].(map[string]any)["values"])
		}
	}
	access, err := AddonsAccess(kc)
	if err != nil {
		t.Fatal(err)
	}
	want := "subjects:\n- kind: ServiceAccount\n  name: flotilla-addons\n  namespace: acme\n"
	if got := string(access.Data[AddonsAccessKey]); !strings.Contains(got, want) || !strings.Contains(got, "name: cluster-admin") {
		t.Errorf("the add-ons' binding inside:\n%s", got)
	}
	if *access.Type != "addons.cluster.x-k8s.io/resource-set" || access.Labels[clusterapi.LabelCluster] != "k8s-prod" || access.Labels["cluster.x-k8s.io/cluster-name"] != "k8s-prod" {
		t.Errorf("access Secret type %v, labels %v", *access.Type, access.Labels)
	}
}

// The usage-api attributes pods and claims by their app.kubernetes.io/instance label: the
// control plane's pods, the workers' VM pods and their root disks carry the cluster's app's. The
// root disks are exempt from the app's volume policy Retain: they go with their VMs.
func TestUsageCountsAsTheClustersApp(t *testing.T) {
	for _, release := range []string{"kubernetes-prod", ""} {
		kc := makeCluster()
		if release != "" {
			kc.Labels = map[string]string{"app.kubernetes.io/instance": release}
		}
		objs := desired(t, Inputs{Cluster: kc, WorkerVersion: "v1.37.2"})
		kmt := objs["KubevirtMachineTemplate/"+str(t, objs["MachineDeployment/k8s-prod-gpu"], "spec", "template", "spec", "infrastructureRef", "name")]
		vm := []string{"spec", "template", "spec", "virtualMachineTemplate", "spec"}
		disks, _, _ := unstructured.NestedSlice(kmt.Object, append(vm, "dataVolumeTemplates")...)
		if len(disks) != 1 {
			t.Fatalf("data volume templates %v", disks)
		}
		for what, labels := range map[string]map[string]string{
			"VM pod":    stringMap(t, kmt, append(vm, "template", "metadata", "labels")...),
			"root disk": stringMap(t, &unstructured.Unstructured{Object: disks[0].(map[string]any)}, "metadata", "labels"),
			"control plane pod": stringMap(t, objs["KamajiControlPlane/"+ControlPlaneName(kc.Name)],
				"spec", "deployment", "podAdditionalMetadata", "labels"),
		} {
			if got, ok := labels["app.kubernetes.io/instance"]; got != release || ok != (release != "") {
				t.Errorf("%s of a cluster of release %q: instance label %q (set: %v)", what, release, got, ok)
			}
			if labels[clusterapi.LabelCluster] != kc.Name {
				t.Errorf("%s: labels %v", what, labels)
			}
			if policy, ok := labels[fmeta.LabelVolumePolicy]; (what == "root disk") != (ok && policy == fmeta.VolumePolicyDelete) {
				t.Errorf("%s: volume policy label %q (set: %v)", what, policy, ok)
			}
		}
	}
}

func stringMap(t *testing.T, u *unstructured.Unstructured, path ...string) map[string]string {
	t.Helper()
	m, _, err := unstructured.NestedStringMap(u.Object, path...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A DataStore's name gives back the etcd namespace it describes; another name gives none.
func TestDataStoreNameRoundTrips(t *testing.T) {
	if got := DataStoreEtcdNamespace(DataStoreName("tenant-acme")); got != "tenant-acme" {
		t.Errorf("DataStoreEtcdNamespace(DataStoreName(tenant-acme)) = %q", got)
	}
	if got := DataStoreEtcdNamespace("default"); got != "" {
		t.Errorf("DataStoreEtcdNamespace(default) = %q, want none", got)
	}
}
