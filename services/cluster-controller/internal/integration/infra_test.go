package integration_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// Each cluster's cloud-controller-manager, CSI controller and cluster-autoscaler run in the
// platform's infrastructure namespace, as a ServiceAccount bound in the cluster's namespace only,
// with a copy of the cluster's admin kubeconfig; the cluster is Ready only once they are
// available; its deletion takes them, the autoscaler before the workers.
func TestCloudControllersRunInThePlatformsNamespace(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "infra", "infra")
	create(t, makeCluster(ns, "edge").obj())
	stem := cluster.InfraName(ns, "edge")
	p := providerStandIn{t}
	p.infrastructureReady(ns, "edge")
	kc := condition(t, ns, "edge", clusterapi.CloudControllersReadyCondition, metav1.ConditionFalse, clusterapi.WaitingReason)
	if _, err := k8sGetSecret(infraNamespace, cluster.InfraKubeconfigSecret(ns, "edge")); !apierrors.IsNotFound(err) {
		t.Errorf("the kubeconfig was copied before the control plane wrote it: %v", err)
	}
	p.controlPlaneRunning(ns, "edge", "v1.37.2")

	// The identity: a ServiceAccount of the platform's namespace, bound in the cluster's.
	rb := &rbacv1.RoleBinding{}
	eventually(t, "the infrastructure RoleBinding", func() (bool, error) {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cluster.InfraBindingName("edge")}, rb)
		return err == nil, client.IgnoreNotFound(err)
	})
	if rb.RoleRef.Name != cluster.InfraClusterRole || len(rb.Subjects) != 1 ||
		rb.Subjects[0] != (rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: stem, Namespace: infraNamespace}) {
		t.Errorf("RoleBinding: %+v → %+v", rb.Subjects, rb.RoleRef)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: infraNamespace, Name: stem}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("ServiceAccount %s: %v", stem, err)
	}
	// The kubeconfig they use is the control plane's, copied out of the tenant's namespace.
	eventually(t, "the kubeconfig's copy", func() (bool, error) {
		s, err := k8sGetSecret(infraNamespace, cluster.InfraKubeconfigSecret(ns, "edge"))
		return err == nil && string(s.Data["value"]) == "kubeconfig of edge", client.IgnoreNotFound(err)
	})
	// The CCM's cloud-config names the cluster's namespace, as data.
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: infraNamespace, Name: stem + "-cloud-config"}, cm); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Namespace   string
		InfraLabels map[string]string `json:"infraLabels"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["cloud-config"]), &cfg); err != nil || cfg.Namespace != ns || cfg.InfraLabels[clusterapi.LabelClusterUID] != string(kc.UID) {
		t.Errorf("cloud-config %q: %v", cm.Data["cloud-config"], err)
	}
	for _, c := range cluster.InfraControllers {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: infraNamespace, Name: stem + "-" + c}, d); err != nil {
			t.Fatalf("Deployment %s-%s: %v", stem, c, err)
		}
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != stem || !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == cluster.InfraKubeconfigSecret(ns, "edge")
		}) {
			t.Errorf("%s runs as %q with volumes %+v", c, pod.ServiceAccountName, pod.Volumes)
		}
		// The CCM finds the namespace in its cloud-config.
		if args := strings.Join(pod.Containers[0].Args, " "); !strings.Contains(args, "edge") || (c != cluster.CloudControllerSuffix && !strings.Contains(args, ns)) {
			t.Errorf("%s does not name the cluster and its namespace: %s", c, args)
		}
	}
	kc = condition(t, ns, "edge", clusterapi.CloudControllersReadyCondition, metav1.ConditionFalse, clusterapi.ProgressingReason)
	if msg := meta.FindStatusCondition(kc.Status.Conditions, clusterapi.CloudControllersReadyCondition).Message; !strings.Contains(msg, "0/3") {
		t.Errorf("CloudControllersReady: %q", msg)
	}
	p.cloudControllersAvailable(ns, "edge")
	p.workersReady(ns, "edge-default", 1)
	p.addonsInstalled(ns, "edge")
	condition(t, ns, "edge", "Ready", metav1.ConditionTrue, "")

	// Deleted by someone, an object comes back.
	ccm := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: infraNamespace, Name: stem + "-" + cluster.CloudControllerSuffix}}
	if err := k8s.Delete(ctx, ccm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the CCM's Deployment back", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(ccm), &appsv1.Deployment{})
		return err == nil, client.IgnoreNotFound(err)
	})

	// What the cloud controllers made in the cluster's namespace goes with the cluster: the CCM's
	// load balancer Services (its labels: the cloud-config's infraLabels and the customer Service's
	// name) and the CSI controller's DataVolumes (the same labels, its flag). A Service or a
	// DataVolume of the tenant's that only looks like one (another cluster's UID, or none) stays.
	made, kept := map[client.Object]bool{}, map[client.Object]bool{}
	add := func(o client.Object, labels map[string]string, keep bool) {
		o.SetNamespace(ns)
		o.SetLabels(labels)
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		if keep {
			kept[o] = true
		} else {
			made[o] = true
		}
	}
	lbSpec := corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 443}}}
	ccmLabels := map[string]string{clusterapi.LabelTenantService: "web", "cluster.x-k8s.io/tenant-service-namespace": "default"}
	maps.Copy(ccmLabels, cfg.InfraLabels)
	add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a1b2c3"}, Spec: lbSpec}, ccmLabels, false)
	add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lookalike"}, Spec: lbSpec},
		map[string]string{clusterapi.LabelTenantService: "web", "cluster.x-k8s.io/cluster-name": "edge", clusterapi.LabelClusterUID: "another"}, true)
	add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "tenants"}, Spec: lbSpec},
		map[string]string{"cluster.x-k8s.io/cluster-name": "edge", clusterapi.LabelClusterUID: string(kc.UID)}, true)
	dataVolume := func(name string) *unstructured.Unstructured {
		dv := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
			"source":  map[string]any{"blank": map[string]any{}},
			"storage": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
		}}}
		dv.SetGroupVersionKind(cluster.DataVolumeGVK)
		dv.SetName(name)
		return dv
	}
	add(dataVolume("pvc-0b1c"), cluster.InfraLabels(kc), false)
	add(dataVolume("root-like"), map[string]string{"cluster.x-k8s.io/cluster-name": "edge"}, true)
	// Labels are the tenant's to write: a DataVolume that has a controller (a VM's disk) is not the
	// CSI controller's, whatever its labels say.
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-standin"}}
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	owned := dataVolume("vm-disk")
	owned.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))})
	add(owned, cluster.InfraLabels(kc), true)

	deleteAndWait(t, ns, "edge")
	for o := range made {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s, made by the cloud controllers, outlived the cluster: %v", o, o.GetName(), err)
		}
	}
	for o := range kept {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s, not the cloud controllers', went with the cluster: %v", o, o.GetName(), err)
		}
	}
	for _, gvk := range cluster.InfraKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k8s.List(ctx, list, client.InNamespace(infraNamespace), client.MatchingLabels{clusterapi.LabelClusterNamespace: ns}); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			t.Errorf("%s %s left behind", gvk.Kind, list.Items[0].GetName())
		}
	}
	if _, err := k8sGetSecret(infraNamespace, cluster.InfraKubeconfigSecret(ns, "edge")); !apierrors.IsNotFound(err) {
		t.Errorf("the kubeconfig's copy outlived the cluster: %v", err)
	}
}

// An object in the infrastructure namespace with a cluster's name and labels but not made by it
// (no owner annotation of its UID) is neither adopted, changed nor deleted; the cluster is
// Stalled naming it.
func TestAForeignObjectInTheInfrastructureNamespaceIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "infra-foreign", "infra-foreign")
	stem := cluster.InfraName(ns, "lookalike")
	planted := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: infraNamespace, Name: stem,
		Labels: map[string]string{clusterapi.LabelCluster: "lookalike", clusterapi.LabelClusterNamespace: ns}}}
	if err := k8s.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	create(t, makeCluster(ns, "lookalike").obj())
	condition(t, ns, "lookalike", "Stalled", metav1.ConditionTrue, clusterapi.ConflictReason)
	deleteAndWait(t, ns, "lookalike")
	got := &corev1.ServiceAccount{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(planted), got); err != nil || len(got.Annotations) > 0 {
		t.Errorf("the planted ServiceAccount was changed or deleted: %v %v", err, got.Annotations)
	}
}

func k8sGetSecret(ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	return s, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s)
}
