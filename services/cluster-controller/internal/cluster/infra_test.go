package cluster

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

func TestInfraControllersRunInThePlatformsNamespace(t *testing.T) {
	kc := makeCluster()
	o := DefaultOptions()
	o.InfraNamespace = "flotilla-cluster-infra"
	objs, err := Desired(Inputs{Cluster: kc, DataStore: "flotilla-acme", WorkerVersion: "v1.37.2"}, o)
	if err != nil {
		t.Fatal(err)
	}
	stem := InfraName(kc.Namespace, kc.Name)
	kinds := map[string]int{}
	for _, u := range objs {
		switch u.GetNamespace() {
		case o.InfraNamespace:
			kinds[u.GetKind()]++
			// No owner reference can cross namespaces: the annotation and labels name the cluster.
			if len(u.GetOwnerReferences()) > 0 || u.GetAnnotations()[clusterapi.AnnotationOwner] != string(kc.UID) ||
				u.GetLabels()[clusterapi.LabelCluster] != kc.Name || u.GetLabels()[clusterapi.LabelClusterNamespace] != kc.Namespace {
				t.Errorf("%s %s: owner refs %v, annotations %v, labels %v", u.GetKind(), u.GetName(), u.GetOwnerReferences(), u.GetAnnotations(), u.GetLabels())
			}
		case kc.Namespace:
			if u.GetKind() == "RoleBinding" {
				kinds["RoleBinding"]++
				subject := u.Object["subjects"].([]any)[0].(map[string]any)
				if subject["namespace"] != o.InfraNamespace || subject["name"] != stem || str(t, u, "roleRef", "name") != InfraClusterRole {
					t.Errorf("RoleBinding binds %v to %s", subject, str(t, u, "roleRef", "name"))
				}
			}
		default:
			t.Errorf("%s %s in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
	}
	if kinds["Deployment"] != 3 || kinds["ServiceAccount"] != 1 || kinds["ConfigMap"] != 1 || kinds["RoleBinding"] != 1 {
		t.Errorf("infrastructure objects: %v", kinds)
	}
	// Without the option, none.
	objs, err = Desired(Inputs{Cluster: kc, DataStore: "flotilla-acme", WorkerVersion: "v1.37.2"}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() == "Deployment" || u.GetKind() == "RoleBinding" {
			t.Errorf("%s %s without an infrastructure namespace", u.GetKind(), u.GetName())
		}
	}
}

// The stem is one name per cluster, whatever its namespace and name spell together.
func TestInfraNamesDoNotCollide(t *testing.T) {
	if InfraName("a-b", "c") == InfraName("a", "b-c") || InfraName("a", "b") != InfraName("a", "b") {
		t.Error("InfraName collides or is not stable")
	}
	if n := InfraKubeconfigSecret("a", "b"); len(n) > 63 {
		t.Errorf("%s is too long for a label value", n)
	}
}

// The cloud-config is built as data: a namespace is a value, not YAML text.
func TestCloudConfigNamesTheClustersNamespace(t *testing.T) {
	kc := makeCluster()
	kc.Namespace = "acme"
	o := DefaultOptions()
	o.InfraNamespace = "infra"
	objs, err := infra(kc, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != "ConfigMap" {
			continue
		}
		var cfg cloudConfig
		if err := yaml.Unmarshal([]byte(str(t, u, "data", "cloud-config")), &cfg); err != nil || cfg.Namespace != "acme" ||
			cfg.InfraLabels[clusterv1.ClusterNameLabel] != kc.Name || !cfg.LoadBalancer.Enabled {
			t.Errorf("cloud-config %+v: %v", cfg, err)
		}
	}
}

// What the cloud controllers make in the cluster's namespace is labelled with the cluster's name,
// its UID (its deletion finds them by both) and its app's release (the usage-api and the app's
// volume policy find the customer's volumes by it): the CCM through its cloud-config, the CSI
// controller through its flag, and the CSI node plugin is told the same.
func TestTheCloudControllersLabelWhatTheyMake(t *testing.T) {
	kc := makeCluster()
	kc.Labels = map[string]string{"app.kubernetes.io/instance": "kubernetes-prod"}
	want := map[string]string{clusterv1.ClusterNameLabel: kc.Name, clusterapi.LabelClusterUID: string(kc.UID), "app.kubernetes.io/instance": "kubernetes-prod"}
	if got := InfraLabels(kc); !maps.Equal(got, want) {
		t.Errorf("InfraLabels: %v", got)
	}
	o := DefaultOptions()
	o.InfraNamespace = "infra"
	objs := desiredWith(t, Inputs{Cluster: kc, WorkerVersion: "v1.37.2"}, o)
	csi := objs["Deployment/"+InfraName(kc.Namespace, kc.Name)+"-"+CSIControllerSuffix]
	if csi == nil {
		t.Fatal("no CSI controller")
	}
	containers, _, _ := unstructured.NestedSlice(csi.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	flag := "--infra-cluster-labels=app.kubernetes.io/instance=kubernetes-prod,cluster.flotilla.dev/cluster-uid=" + string(kc.UID) + ",cluster.x-k8s.io/cluster-name=" + kc.Name
	if !slices.Contains(args, flag) {
		t.Errorf("CSI controller args %v lack %s", args, flag)
	}
	values, _, _ := unstructured.NestedStringMap(objs["HelmRelease/"+AddonReleaseName(kc.Name, "csi-node")].Object, "spec", "values", "cluster", "infraLabels")
	if !maps.Equal(values, want) {
		t.Errorf("the CSI node plugin is told %v", values)
	}
}

// cluster-autoscaler is made for one minor version: a cluster runs the image of its own minor,
// or the default image for a minor the platform names none for.
func TestAutoscalerOfTheClustersMinor(t *testing.T) {
	o := DefaultOptions()
	o.InfraNamespace = "flotilla-cluster-infra"
	o.Images.AutoscalerByMinor = map[string]string{"1.36": "registry.example/cluster-autoscaler:v1.36.1"}
	for version, want := range map[string]string{"1.36": "registry.example/cluster-autoscaler:v1.36.1", "1.37": o.Images.Autoscaler} {
		kc := makeCluster()
		kc.Spec.Version = version
		objs, err := Desired(Inputs{Cluster: kc, DataStore: "flotilla-acme", WorkerVersion: "v" + version + ".0"}, o)
		if err != nil {
			t.Fatal(err)
		}
		image := ""
		for _, u := range objs {
			if u.GetKind() == "Deployment" && strings.HasSuffix(u.GetName(), "-"+AutoscalerSuffix) {
				containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				image, _ = containers[0].(map[string]any)["image"].(string)
			}
		}
		if image != want {
			t.Errorf("a %s cluster's autoscaler runs %q, want %q", version, image, want)
		}
	}
}
