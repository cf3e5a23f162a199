package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

const timeout = 30 * time.Second

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

// tenantNamespace makes a tenant namespace as the tenant-controller labels it: served by the etcd
// of namespace etcd (none when empty).
func tenantNamespace(t *testing.T, name, etcd string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{tenancyv1.LabelTenant: name}}}
	if etcd != "" {
		ns.Labels[tenancyv1.LabelEtcd] = etcd
	}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// storageClass makes a StorageClass of name (if missing).
func storageClass(t *testing.T, name string) {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "linstor.csi.linbit.com"}
	if err := k8s.Create(context.Background(), sc); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// schedulingClass makes a SchedulingClass of name (if missing) that places nothing in particular.
func schedulingClass(t *testing.T, name string) {
	t.Helper()
	sc := &storagepolicyv1.SchedulingClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), sc); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// kubernetesCluster is what the starter catalog's chart renders, with two node groups.
type kcBuilder struct{ kc *clusterapi.KubernetesCluster }

func makeCluster(ns, name string) *kcBuilder {
	return &kcBuilder{&clusterapi.KubernetesCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: clusterapi.KubernetesClusterSpec{
			Version:      "1.37",
			ControlPlane: clusterapi.ControlPlane{Replicas: 2},
			NodeGroups: []clusterapi.NodeGroup{
				{Name: "default", MinReplicas: 1, MaxReplicas: 3, InstanceType: "medium"},
			},
			KubeconfigSecretRef: &clusterapi.LocalSecretReference{Name: name + "-admin-kubeconfig"},
		},
	}}
}

func (b *kcBuilder) group(g clusterapi.NodeGroup) *kcBuilder {
	b.kc.Spec.NodeGroups = append(b.kc.Spec.NodeGroups, g)
	return b
}

func (b *kcBuilder) obj() *clusterapi.KubernetesCluster { return b.kc }

func create(t *testing.T, kc *clusterapi.KubernetesCluster) {
	t.Helper()
	if err := k8s.Create(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, ns, name string) *clusterapi.KubernetesCluster {
	t.Helper()
	kc := &clusterapi.KubernetesCluster{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, kc); err != nil {
		t.Fatal(err)
	}
	return kc
}

// condition waits until the cluster's condition has status (and reason, if given) for its current
// generation, and returns the cluster.
func condition(t *testing.T, ns, name, cond string, status metav1.ConditionStatus, reason string) *clusterapi.KubernetesCluster {
	t.Helper()
	kc := &clusterapi.KubernetesCluster{}
	eventually(t, fmt.Sprintf("%s/%s %s=%s %s", ns, name, cond, status, reason), func() (bool, error) {
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, kc); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(kc.Status.Conditions, cond)
		return c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == kc.Generation, nil
	})
	return kc
}

// update changes the cluster's spec as a user would, retrying on conflicts with the controller.
func update(t *testing.T, ns, name string, change func(*clusterapi.KubernetesCluster)) error {
	t.Helper()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		kc := get(t, ns, name)
		change(kc)
		return k8s.Update(context.Background(), kc)
	})
}

// updateObject changes an owned object as another party (CAPI, the autoscaler) would.
func updateObject(t *testing.T, gvk schema.GroupVersionKind, ns, name string, change func(*unstructured.Unstructured)) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := object(t, gvk, ns, name)
		change(u)
		return k8s.Update(context.Background(), u)
	}); err != nil {
		t.Fatal(err)
	}
}

// object reads an object of gvk, or nil when absent.
func object(t *testing.T, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// waitObject waits until an object of gvk exists and satisfies ok.
func waitObject(t *testing.T, gvk schema.GroupVersionKind, ns, name string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, gvk.Kind+" "+ns+"/"+name, func() (bool, error) {
		u = object(t, gvk, ns, name)
		return u != nil && (ok == nil || ok(u)), nil
	})
	return u
}

func str(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

func num(u *unstructured.Unstructured, path ...string) int64 {
	n, _, _ := unstructured.NestedInt64(u.Object, path...)
	return n
}

// providerStandIn writes what the real providers would write into the status of the objects the
// cluster-controller owns: here nothing runs a VM or a hosted API server. Every write stamps the
// object's current generation, as the providers do.
type providerStandIn struct{ t *testing.T }

func (p providerStandIn) setStatus(gvk schema.GroupVersionKind, ns, name string, status func(u *unstructured.Unstructured) map[string]any) {
	p.t.Helper()
	eventually(p.t, "status of "+gvk.Kind+" "+name, func() (bool, error) {
		u := object(p.t, gvk, ns, name)
		if u == nil {
			return false, nil
		}
		u.Object["status"] = status(u)
		err := k8s.Status().Update(context.Background(), u)
		return err == nil, err
	})
}

func cond(u *unstructured.Unstructured, t string, status bool) map[string]any {
	s := "False"
	if status {
		s = "True"
	}
	return map[string]any{"type": t, "status": s, "reason": "StandIn", "message": "", "observedGeneration": u.GetGeneration(),
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}
}

// infrastructureReady: CAPI's Cluster controller mirrors the KubevirtCluster's readiness.
func (p providerStandIn) infrastructureReady(ns, name string) {
	p.setStatus(cluster.ClusterGVK, ns, name, func(u *unstructured.Unstructured) map[string]any {
		return map[string]any{"observedGeneration": u.GetGeneration(), "conditions": []any{cond(u, "InfrastructureReady", true)}}
	})
}

// controlPlaneRunning: Kamaji's provider reports the hosted control plane at version, with its
// endpoint in spec (the provider writes it there, and CAPI copies it into the Cluster).
func (p providerStandIn) controlPlaneRunning(ns, clusterName, version string) {
	p.t.Helper()
	name := cluster.ControlPlaneName(clusterName)
	eventually(p.t, "endpoint of "+name, func() (bool, error) {
		u := object(p.t, cluster.KamajiControlPlaneGVK, ns, name)
		if u == nil {
			return false, nil
		}
		_ = unstructured.SetNestedMap(u.Object, map[string]any{"host": clusterName + "." + ns + ".k8s.example", "port": int64(6443)}, "spec", "controlPlaneEndpoint")
		err := k8s.Update(context.Background(), u)
		return err == nil, err
	})
	// The provider's copy of the admin kubeconfig, Cluster API's <cluster>-kubeconfig, controlled
	// by the KamajiControlPlane.
	kcp := object(p.t, cluster.KamajiControlPlaneGVK, ns, name)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName + "-kubeconfig",
		Labels:          map[string]string{"cluster.x-k8s.io/cluster-name": clusterName},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(kcp, cluster.KamajiControlPlaneGVK)}},
		Data: map[string][]byte{"value": []byte("kubeconfig of " + clusterName)}}
	if err := k8s.Create(context.Background(), secret); client.IgnoreAlreadyExists(err) != nil {
		p.t.Fatal(err)
	}
	p.setStatus(cluster.KamajiControlPlaneGVK, ns, name, func(u *unstructured.Unstructured) map[string]any {
		return map[string]any{"version": version, "ready": true, "replicas": int64(2), "readyReplicas": int64(2),
			"initialization": map[string]any{"controlPlaneInitialized": true},
			"conditions":     []any{cond(u, "Available", true)}}
	})
}

// workersReady: CAPI's MachineDeployment controller reports ready machines of its current spec.
func (p providerStandIn) workersReady(ns, md string, ready int64) {
	p.setStatus(cluster.MachineDeploymentGVK, ns, md, func(u *unstructured.Unstructured) map[string]any {
		return map[string]any{"observedGeneration": u.GetGeneration(), "replicas": ready, "readyReplicas": ready,
			"availableReplicas": ready, "upToDateReplicas": ready}
	})
}

// addonInstalled: helm-controller reports the HelmRelease's current generation installed.
func (p providerStandIn) addonInstalled(ns, name string) {
	p.setStatus(cluster.HelmReleaseGVK, ns, name, func(u *unstructured.Unstructured) map[string]any {
		return map[string]any{"observedGeneration": u.GetGeneration(), "conditions": []any{cond(u, "Ready", true)}}
	})
}

// addonsInstalled: helm-controller reports every add-on of the cluster installed.
func (p providerStandIn) addonsInstalled(ns, name string) {
	p.t.Helper()
	for _, a := range cluster.Addons(get(p.t, ns, name), options) {
		waitObject(p.t, cluster.HelmReleaseGVK, ns, cluster.AddonReleaseName(name, a), nil)
		p.addonInstalled(ns, cluster.AddonReleaseName(name, a))
	}
}

// cloudControllersAvailable: kube-controller-manager's Deployment controller and the kubelets
// (none run here) report the cluster's infrastructure controllers available.
func (p providerStandIn) cloudControllersAvailable(ns, name string) {
	p.t.Helper()
	for _, c := range cluster.InfraControllers {
		p.setStatus(cluster.DeploymentGVK, infraNamespace, cluster.InfraName(ns, name)+"-"+c, func(u *unstructured.Unstructured) map[string]any {
			n := num(u, "spec", "replicas")
			return map[string]any{"observedGeneration": u.GetGeneration(), "replicas": n, "updatedReplicas": n, "readyReplicas": n,
				"availableReplicas": n, "conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "StandIn"}}}
		})
	}
}

// ready brings a new cluster to Ready through the stand-in.
func ready(t *testing.T, ns, name string) *clusterapi.KubernetesCluster {
	t.Helper()
	p := providerStandIn{t}
	p.infrastructureReady(ns, name)
	p.controlPlaneRunning(ns, name, "v1.37.2")
	p.cloudControllersAvailable(ns, name)
	p.addonsInstalled(ns, name)
	kc := get(t, ns, name)
	for _, g := range kc.Spec.NodeGroups {
		md := waitObject(t, cluster.MachineDeploymentGVK, ns, cluster.MachineDeploymentName(name, g.Name), nil)
		p.workersReady(ns, md.GetName(), num(md, "spec", "replicas"))
	}
	return condition(t, ns, name, "Ready", metav1.ConditionTrue, "")
}

// deleteAndWait deletes the cluster and waits until it is gone.
func deleteAndWait(t *testing.T, ns, name string) {
	t.Helper()
	kc := &clusterapi.KubernetesCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8s.Delete(context.Background(), kc); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, "cluster "+name+" gone", func() (bool, error) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kc), kc)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
