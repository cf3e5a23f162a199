package integration_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A new cluster becomes every owned object, each naming the others correctly, and becomes Ready
// as the providers report on them; its status carries the endpoint, version and kubeconfig Secret.
func TestClusterBecomesOwnedObjectsAndReady(t *testing.T) {
	ns := tenantNamespace(t, "acme", "acme-etcd")
	create(t, makeCluster(ns, "prod").group(clusterapi.NodeGroup{Name: "gpu", MinReplicas: 0, MaxReplicas: 2, InstanceType: "large",
		Taints: []clusterapi.Taint{{Key: "gpu", Effect: "NoSchedule"}}}).obj())

	c := waitObject(t, cluster.ClusterGVK, ns, "prod", nil)
	if got := str(c, "spec", "controlPlaneRef", "kind") + "/" + str(c, "spec", "controlPlaneRef", "name"); got != "KamajiControlPlane/prod-control-plane" {
		t.Errorf("controlPlaneRef %s", got)
	}
	if got := str(c, "spec", "infrastructureRef", "kind") + "/" + str(c, "spec", "infrastructureRef", "name"); got != "KubevirtCluster/prod" {
		t.Errorf("infrastructureRef %s", got)
	}
	kcp := waitObject(t, cluster.KamajiControlPlaneGVK, ns, "prod-control-plane", nil)
	if str(kcp, "spec", "dataStoreName") != "flotilla-acme-etcd" || str(kcp, "spec", "dataStoreSchema") != "acme_prod" || str(kcp, "spec", "version") != "v1.37.2" {
		t.Errorf("KamajiControlPlane spec %v", kcp.Object["spec"])
	}
	kvc := waitObject(t, cluster.KubevirtClusterGVK, ns, "prod", nil)
	if kvc.GetAnnotations()["cluster.x-k8s.io/managed-by"] != "kamaji" {
		t.Errorf("KubevirtCluster not marked as managed by Kamaji: %v", kvc.GetAnnotations())
	}
	waitObject(t, cluster.MachineHealthCheckGVK, ns, "prod-workers", nil)
	for group, replicas := range map[string]int64{"default": 1, "gpu": 0} {
		md := waitObject(t, cluster.MachineDeploymentGVK, ns, "prod-"+group, nil)
		if got := num(md, "spec", "replicas"); got != replicas {
			t.Errorf("%s: replicas %d, want the group's minimum %d", group, got, replicas)
		}
		boot := str(md, "spec", "template", "spec", "bootstrap", "configRef", "name")
		if object(t, cluster.KubeadmConfigTemplateGVK, ns, boot) == nil {
			t.Errorf("%s names KubeadmConfigTemplate %s, which does not exist", group, boot)
		}
		infra := str(md, "spec", "template", "spec", "infrastructureRef", "name")
		if object(t, cluster.KubevirtMachineTmplGVK, ns, infra) == nil {
			t.Errorf("%s names KubevirtMachineTemplate %s, which does not exist", group, infra)
		}
	}

	kc := condition(t, ns, "prod", clusterapi.ControlPlaneReadyCondition, metav1.ConditionFalse, clusterapi.WaitingReason)
	if !meta.IsStatusConditionTrue(kc.Status.Conditions, fmeta.ReconcilingCondition) || kc.Status.ObservedGeneration == kc.Generation {
		t.Errorf("a cluster whose providers have not reported must be Reconciling and not observed: %+v", kc.Status)
	}

	kc = ready(t, ns, "prod")
	if kc.Status.Endpoint != "https://prod.acme.k8s.example:6443" || kc.Status.Version != "v1.37.2" || kc.Status.KubeconfigSecretName != "prod-admin-kubeconfig" {
		t.Errorf("status %+v", kc.Status)
	}
	if meta.FindStatusCondition(kc.Status.Conditions, fmeta.ReconcilingCondition) != nil || kc.Status.ObservedGeneration != kc.Generation {
		t.Errorf("a Ready cluster must not be Reconciling and must be observed: %+v", kc.Status)
	}
	if msg := meta.FindStatusCondition(kc.Status.Conditions, clusterapi.WorkersReadyCondition).Message; msg != "default 1/1 ready, gpu 0/0 ready" {
		t.Errorf("WorkersReady says %q", msg)
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "prod-admin-kubeconfig"}, secret); err != nil {
		t.Fatal(err)
	}
	if string(secret.Data[kubernetescluster.KubeconfigKey]) != "kubeconfig of prod" || metav1.GetControllerOf(secret) == nil || metav1.GetControllerOf(secret).UID != kc.UID {
		t.Errorf("the customer's kubeconfig Secret: %v, controller %v", secret.Data, metav1.GetControllerOf(secret))
	}
}

// Secrets are not watched (the controller may not list them): a kubeconfig the provider rotates
// reaches the customer's Secret and the infrastructure controllers' copy, and a customer's Secret
// someone deletes comes back, at the next resync.
func TestRotatedKubeconfigReachesTheCustomer(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "rotate", "rotate-etcd")
	create(t, makeCluster(ns, "rot").obj())
	ready(t, ns, "rot")
	src := &corev1.Secret{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rot-kubeconfig"}, src); err != nil {
		t.Fatal(err)
	}
	src.Data["value"] = []byte("rotated kubeconfig of rot")
	if err := k8s.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	holds := func(ns, name, key, want string) func() (bool, error) {
		return func() (bool, error) {
			s := &corev1.Secret{}
			err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
			return err == nil && string(s.Data[key]) == want, client.IgnoreNotFound(err)
		}
	}
	eventually(t, "the rotated kubeconfig in the customer's Secret", holds(ns, "rot-admin-kubeconfig", kubernetescluster.KubeconfigKey, "rotated kubeconfig of rot"))
	eventually(t, "the rotated kubeconfig in the infrastructure copy", holds(infraNamespace, cluster.InfraKubeconfigSecret(ns, "rot"), "value", "rotated kubeconfig of rot"))

	if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rot-admin-kubeconfig"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the customer's Secret back", holds(ns, "rot-admin-kubeconfig", kubernetescluster.KubeconfigKey, "rotated kubeconfig of rot"))
}

// A <cluster>-kubeconfig Secret the control plane does not control (a tenant admin can create
// Secrets in the namespace) is never handed out as the cluster's kubeconfig; a Secret of the
// customer's kubeconfig name that the cluster did not create is left alone.
// A KubernetesCluster carries the controller's finalizer from its creation on, added by the
// chart's admission policy inside kube-apiserver: the first reconcile has no finalizer to write.
// Without it (the policy not installed, or the finalizer taken off), the controller adds it.
func TestFinalizerIsAddedAtAdmission(t *testing.T) {
	ns := tenantNamespace(t, "admitted", "admitted-etcd")
	kc := makeCluster(ns, "prod").obj()
	create(t, kc)
	if !kubernetescluster.HasFinalizer(kc) {
		t.Errorf("created with finalizers %v, want %s", kc.Finalizers, kubernetescluster.Finalizer)
	}
	if err := update(t, ns, "prod", func(kc *clusterapi.KubernetesCluster) { kc.Finalizers = nil }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the controller adds its finalizer back", func() (bool, error) {
		return kubernetescluster.HasFinalizer(get(t, ns, "prod")), nil
	})
}

func TestKubeconfigComesOnlyFromTheControlPlane(t *testing.T) {
	ns := tenantNamespace(t, "kubeconfig", "kubeconfig")
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pk-kubeconfig",
		Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "pk"}}, Data: map[string][]byte{"value": []byte("attacker's")}}
	if err := k8s.Create(context.Background(), planted); err != nil {
		t.Fatal(err)
	}
	create(t, makeCluster(ns, "pk").obj())
	p := providerStandIn{t}
	p.infrastructureReady(ns, "pk")
	p.controlPlaneRunning(ns, "pk", "v1.37.2")
	eventually(t, "ControlPlaneReady waiting for the admin kubeconfig", func() (bool, error) {
		c := meta.FindStatusCondition(get(t, ns, "pk").Status.Conditions, clusterapi.ControlPlaneReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "admin kubeconfig"), nil
	})
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "pk-admin-kubeconfig"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a customer kubeconfig was written from a planted Secret: %v", err)
	}

	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fk-admin-kubeconfig"}, Data: map[string][]byte{"kubeconfig": []byte("mine")}}
	if err := k8s.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	create(t, makeCluster(ns, "fk").obj())
	p.infrastructureReady(ns, "fk")
	p.controlPlaneRunning(ns, "fk", "v1.37.2")
	condition(t, ns, "fk", fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.ConflictReason)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(foreign), foreign); err != nil || string(foreign.Data["kubeconfig"]) != "mine" || len(foreign.OwnerReferences) > 0 {
		t.Errorf("the foreign Secret was changed: %v %v", err, foreign)
	}
}

// Raising a node group's minimum scales its MachineDeployment; the cluster is not Ready until the
// new machines are.
func TestScaleNodeGroup(t *testing.T) {
	ns := tenantNamespace(t, "scale", "scale")
	create(t, makeCluster(ns, "web").obj())
	ready(t, ns, "web")
	if err := update(t, ns, "web", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].MinReplicas = 2 }); err != nil {
		t.Fatal(err)
	}
	md := waitObject(t, cluster.MachineDeploymentGVK, ns, "web-default", func(u *unstructured.Unstructured) bool { return num(u, "spec", "replicas") == 2 })
	if md.GetAnnotations()["cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"] != "2" {
		t.Errorf("autoscaler annotations %v", md.GetAnnotations())
	}
	condition(t, ns, "web", clusterapi.WorkersReadyCondition, metav1.ConditionFalse, "")
	providerStandIn{t}.workersReady(ns, "web-default", 2)
	kc := condition(t, ns, "web", "Ready", metav1.ConditionTrue, "")
	if g := kc.Status.NodeGroups[0]; g.Desired != 2 || g.Ready != 2 {
		t.Errorf("node group status %+v", g)
	}

	// The autoscaler moves replicas within the bounds: the controller keeps its choice.
	updateObject(t, cluster.MachineDeploymentGVK, ns, "web-default", func(u *unstructured.Unstructured) {
		u.Object["spec"].(map[string]any)["replicas"] = int64(3)
	})
	before := counter.count(types.NamespacedName{Namespace: ns, Name: "web"})
	eventually(t, "a reconcile after the autoscaler's change", func() (bool, error) {
		return counter.count(types.NamespacedName{Namespace: ns, Name: "web"}) > before, nil
	})
	if got := num(object(t, cluster.MachineDeploymentGVK, ns, "web-default"), "spec", "replicas"); got != 3 {
		t.Errorf("the controller overrode the autoscaler: replicas %d", got)
	}
}

// A converged cluster's reconcile writes nothing: not its status, not an owned object.
func TestSteadyStateIsQuiet(t *testing.T) {
	ns := tenantNamespace(t, "quiet", "quiet")
	create(t, makeCluster(ns, "calm").obj())
	ready(t, ns, "calm")
	versions := func() map[string]string {
		out := map[string]string{}
		for _, gvk := range kubernetescluster.Owned {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, o := range list.Items {
				out[gvk.Kind+"/"+o.GetName()] = o.GetResourceVersion()
			}
		}
		return out
	}
	// Ready for the current generation: from here on, no reconcile has anything to write.
	key := types.NamespacedName{Namespace: ns, Name: "calm"}
	before, status := versions(), get(t, ns, "calm").Status

	// Poke: an annotation change is a reconcile that finds nothing to do. (Tests run one at a
	// time: no other cluster's reconcile writes meanwhile.)
	n, w := counter.count(key), writes.n.Load()
	if err := update(t, ns, "calm", func(kc *clusterapi.KubernetesCluster) { kc.Annotations = map[string]string{"poke": "1"} }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the poke's reconcile", func() (bool, error) { return counter.count(key) > n, nil })
	if got := writes.n.Load() - w; got != 0 {
		t.Errorf("a converged reconcile sent %d API writes; the last: %v", got, writes.recent())
	}
	after := versions()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s was written in a converged reconcile (resourceVersion %s → %s)", k, v, after[k])
		}
	}
	if got := get(t, ns, "calm").Status; !equalStatus(got, status) {
		t.Errorf("status was rewritten: %+v → %+v", status, got)
	}
}

// A reconcile working from a copy older than the cluster's last status write (the cache had not
// caught up) writes no status, so it neither restamps the conditions nor announces Ready twice, and
// looks again.
func TestAReconcileFromAStaleCopyWritesNothing(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "stale", "stale")
	create(t, makeCluster(ns, "behind").obj())
	ready(t, ns, "behind")
	current := condition(t, ns, "behind", fmeta.ReadyCondition, metav1.ConditionTrue, "")

	// What the cache held before the status write: no conditions.
	stale := current.DeepCopy()
	stale.Status.Conditions = nil
	lagging, err := testenv.Lagging(env.Config, k8s.Scheme(), stale)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a condition written again would carry another transition time (seconds)
	r := &kubernetescluster.Reconciler{Client: lagging, APIReader: lagging, Options: options, Retry: time.Second}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(current)})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Error("a stale copy is not looked at again")
	}
	if after := get(t, ns, "behind"); after.ResourceVersion != current.ResourceVersion {
		t.Errorf("the status was written again from a stale copy (resourceVersion %s → %s)", current.ResourceVersion, after.ResourceVersion)
	}
}

func equalStatus(a, b clusterapi.KubernetesClusterStatus) bool {
	if len(a.Conditions) != len(b.Conditions) || a.ObservedGeneration != b.ObservedGeneration {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i] != b.Conditions[i] {
			return false
		}
	}
	return true
}

// A version change rolls the control plane first; the workers follow once it runs the new version.
func TestUpgradeRollsControlPlaneThenWorkers(t *testing.T) {
	ns := tenantNamespace(t, "upgrade", "upgrade")
	create(t, makeCluster(ns, "up").obj())
	ready(t, ns, "up")
	if err := update(t, ns, "up", func(kc *clusterapi.KubernetesCluster) { kc.Spec.Version = "1.38" }); err != nil {
		t.Fatal(err)
	}
	waitObject(t, cluster.KamajiControlPlaneGVK, ns, "up-control-plane", func(u *unstructured.Unstructured) bool { return str(u, "spec", "version") == "v1.38.0" })
	kc := condition(t, ns, "up", clusterapi.ControlPlaneReadyCondition, metav1.ConditionFalse, "")
	if !strings.Contains(meta.FindStatusCondition(kc.Status.Conditions, clusterapi.ControlPlaneReadyCondition).Message, "has not been reported for generation") {
		t.Errorf("ControlPlaneReady: %+v", meta.FindStatusCondition(kc.Status.Conditions, clusterapi.ControlPlaneReadyCondition))
	}
	if v := str(object(t, cluster.MachineDeploymentGVK, ns, "up-default"), "spec", "template", "spec", "version"); v != "v1.37.2" {
		t.Fatalf("workers moved to %s before the control plane", v)
	}
	providerStandIn{t}.controlPlaneRunning(ns, "up", "v1.38.0")
	md := waitObject(t, cluster.MachineDeploymentGVK, ns, "up-default", func(u *unstructured.Unstructured) bool {
		return str(u, "spec", "template", "spec", "version") == "v1.38.0"
	})
	if !strings.HasPrefix(str(md, "spec", "template", "spec", "infrastructureRef", "name"), "up-default-") {
		t.Errorf("machine template %s", str(md, "spec", "template", "spec", "infrastructureRef", "name"))
	}
	providerStandIn{t}.workersReady(ns, "up-default", 1)
	if kc := condition(t, ns, "up", "Ready", metav1.ConditionTrue, ""); kc.Status.Version != "v1.38.0" {
		t.Errorf("status.version %s", kc.Status.Version)
	}
}

// Deletion removes the workers first; the control plane stays until they are gone, and Ready says
// what the deletion waits for.
func TestDeletionRemovesWorkersBeforeControlPlane(t *testing.T) {
	ns := tenantNamespace(t, "teardown", "teardown")
	create(t, makeCluster(ns, "old").obj())
	waitObject(t, cluster.MachineDeploymentGVK, ns, "old-default", nil)
	// CAPI holds a MachineDeployment while its machines drain: a finalizer plays that.
	updateObject(t, cluster.MachineDeploymentGVK, ns, "old-default", func(u *unstructured.Unstructured) {
		u.SetFinalizers([]string{"test.flotilla.dev/machines-draining"})
	})
	if err := k8s.Delete(context.Background(), get(t, ns, "old")); err != nil {
		t.Fatal(err)
	}
	waitObject(t, cluster.MachineDeploymentGVK, ns, "old-default", func(u *unstructured.Unstructured) bool { return !u.GetDeletionTimestamp().IsZero() })
	// The reconcile that deleted the MachineDeployment writes its status after: Ready names the
	// workers once that write lands (an earlier stage's message until then).
	eventually(t, "Ready naming what the deletion waits for", func() (bool, error) {
		c := meta.FindStatusCondition(get(t, ns, "old").Status.Conditions, "Ready")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fmeta.DeletingReason &&
			strings.Contains(c.Message, "MachineDeployment/old-default"), nil
	})
	for _, gvk := range []struct{ kind, name string }{{"KamajiControlPlane", "old-control-plane"}, {"Cluster", "old"}} {
		gv := cluster.KamajiControlPlaneGVK
		if gvk.kind == "Cluster" {
			gv = cluster.ClusterGVK
		}
		if u := object(t, gv, ns, gvk.name); u == nil || !u.GetDeletionTimestamp().IsZero() {
			t.Errorf("%s deleted while workers remain", gvk.kind)
		}
	}
	updateObject(t, cluster.MachineDeploymentGVK, ns, "old-default", func(u *unstructured.Unstructured) { u.SetFinalizers(nil) })
	eventually(t, "cluster gone", func() (bool, error) {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "old"}, &clusterapi.KubernetesCluster{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	for _, gvk := range kubernetescluster.Owned {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			t.Errorf("%s left behind: %s", gvk.Kind, list.Items[0].GetName())
		}
	}
}

// createForeign creates an object of kind gvk that the cluster-controller did not make, with
// fields set by set.
func createForeign(t *testing.T, gvk schema.GroupVersionKind, ns, name string, set func(*unstructured.Unstructured) error) {
	t.Helper()
	foreign := &unstructured.Unstructured{}
	foreign.SetGroupVersionKind(gvk)
	foreign.SetNamespace(ns)
	foreign.SetName(name)
	if err := set(foreign); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
}

// A name taken by an object the cluster did not make stops the cluster before it applies anything,
// even objects that come before it: none of them could work with the foreign one.
func TestNothingIsAppliedWhileANameIsTaken(t *testing.T) {
	ns := tenantNamespace(t, "foreign-cp", "foreign-cp")
	createForeign(t, cluster.KamajiControlPlaneGVK, ns, "taken-control-plane", func(u *unstructured.Unstructured) error {
		return unstructured.SetNestedField(u.Object, "v1.37.2", "spec", "version")
	})
	create(t, makeCluster(ns, "taken").obj())
	condition(t, ns, "taken", fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.ConflictReason)
	for _, gvk := range []schema.GroupVersionKind{cluster.ClusterGVK, cluster.KubevirtClusterGVK} {
		if got := object(t, gvk, ns, "taken"); got != nil {
			t.Errorf("%s applied while the control plane's name is taken", gvk.Kind)
		}
	}
	deleteAndWait(t, ns, "taken")
}

// An object of a name the cluster needs, made by someone else, is neither changed nor adopted nor
// deleted; the cluster is Stalled naming it.
func TestForeignObjectIsLeftAlone(t *testing.T) {
	ns := tenantNamespace(t, "foreign", "foreign")
	createForeign(t, cluster.KubevirtClusterGVK, ns, "taken", func(u *unstructured.Unstructured) error {
		u.SetLabels(map[string]string{"owner": "someone-else"})
		return nil
	})
	create(t, makeCluster(ns, "taken").obj())
	kc := condition(t, ns, "taken", fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.ConflictReason)
	if msg := meta.FindStatusCondition(kc.Status.Conditions, clusterapi.InfrastructureReadyCondition).Message; !strings.Contains(msg, "KubevirtCluster") {
		t.Errorf("InfrastructureReady does not name the object in the way: %q", msg)
	}
	deleteAndWait(t, ns, "taken")
	got := object(t, cluster.KubevirtClusterGVK, ns, "taken")
	if got == nil || got.GetLabels()["owner"] != "someone-else" || len(got.GetOwnerReferences()) != 0 {
		t.Errorf("the foreign KubevirtCluster was changed or deleted: %v", got)
	}
}

// Without an etcd serving the tenant, or with a spec naming another tenant's etcd, nothing is
// made and the cluster is Stalled saying why.
func TestDatastoreComesFromTheTenant(t *testing.T) {
	ns := tenantNamespace(t, "no-etcd", "")
	create(t, makeCluster(ns, "lonely").obj())
	condition(t, ns, "lonely", fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.NoDatastoreReason)

	ns2 := tenantNamespace(t, "sneaky", "sneaky")
	kc := makeCluster(ns2, "thief").obj()
	kc.Spec.ControlPlane.Etcd = &clusterapi.EtcdReference{Namespace: "acme-etcd"}
	create(t, kc)
	kc = condition(t, ns2, "thief", fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.NoDatastoreReason)
	if msg := meta.FindStatusCondition(kc.Status.Conditions, clusterapi.ControlPlaneReadyCondition).Message; !strings.Contains(msg, "spec.controlPlane.etcd.namespace") {
		t.Errorf("ControlPlaneReady does not name the field: %q", msg)
	}
	for _, n := range []string{"lonely", "thief"} {
		if object(t, cluster.KamajiControlPlaneGVK, map[string]string{"lonely": ns, "thief": ns2}[n], cluster.ControlPlaneName(n)) != nil {
			t.Errorf("%s: a control plane was made without the tenant's etcd", n)
		}
	}
}

// The clusters an etcd serves share one Kamaji DataStore describing it, named after its namespace:
// its Service and TLS Secrets there. A change by someone else is put back; the last cluster to go
// takes it with it.
func TestDataStoreIsSharedAndGoesWithTheLastCluster(t *testing.T) {
	nsA, nsB := tenantNamespace(t, "ds-a", "ds-etcd"), tenantNamespace(t, "ds-b", "ds-etcd")
	create(t, makeCluster(nsA, "one").obj())
	create(t, makeCluster(nsB, "two").obj())
	name := cluster.DataStoreName("ds-etcd")
	for _, ns := range []string{nsA, nsB} {
		kc := map[string]string{nsA: "one", nsB: "two"}[ns]
		waitObject(t, cluster.KamajiControlPlaneGVK, ns, cluster.ControlPlaneName(kc), func(u *unstructured.Unstructured) bool {
			return str(u, "spec", "dataStoreName") == name
		})
	}
	ds := waitObject(t, cluster.DataStoreGVK, "", name, nil)
	endpoints, _, _ := unstructured.NestedStringSlice(ds.Object, "spec", "endpoints")
	if str(ds, "spec", "driver") != "etcd" || !slices.Equal(endpoints, []string{"etcd.ds-etcd.svc:2379"}) ||
		str(ds, "spec", "tlsConfig", "certificateAuthority", "privateKey", "secretReference", "namespace") != "ds-etcd" ||
		str(ds, "spec", "tlsConfig", "clientCertificate", "certificate", "secretReference", "name") != cluster.EtcdClientSecret {
		t.Errorf("DataStore %s does not describe the etcd of ds-etcd: %v", name, ds.Object["spec"])
	}

	updateObject(t, cluster.DataStoreGVK, "", name, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedStringSlice(u.Object, []string{"etcd.elsewhere.svc:2379"}, "spec", "endpoints")
	})
	waitObject(t, cluster.DataStoreGVK, "", name, func(u *unstructured.Unstructured) bool {
		got, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "endpoints")
		return slices.Equal(got, endpoints)
	})

	deleteAndWait(t, nsA, "one")
	if object(t, cluster.DataStoreGVK, "", name) == nil {
		t.Fatal("the DataStore went while a cluster still uses it")
	}
	deleteAndWait(t, nsB, "two")
	if object(t, cluster.DataStoreGVK, "", name) != nil {
		t.Error("the DataStore stayed after the last cluster using it went")
	}
}

// A DataStore that no cluster uses any more, the etcd label of its namespaces having changed, goes
// then, not when some cluster is next deleted; while a cluster of another namespace uses it, it stays.
func TestDataStoreOfAnEtcdNoLongerUsedGoes(t *testing.T) {
	nsA, nsB := tenantNamespace(t, "ds-move-a", "ds-old"), tenantNamespace(t, "ds-move-b", "ds-old")
	create(t, makeCluster(nsA, "one").obj())
	create(t, makeCluster(nsB, "two").obj())
	old, moved := cluster.DataStoreName("ds-old"), cluster.DataStoreName("ds-new")
	on := func(ns, kc, dataStore string) {
		t.Helper()
		waitObject(t, cluster.KamajiControlPlaneGVK, ns, cluster.ControlPlaneName(kc), func(u *unstructured.Unstructured) bool {
			return str(u, "spec", "dataStoreName") == dataStore
		})
	}
	move := func(ns string) {
		t.Helper()
		updateObject(t, corev1.SchemeGroupVersion.WithKind("Namespace"), "", ns, func(u *unstructured.Unstructured) {
			labels := u.GetLabels()
			labels[tenancyv1.LabelEtcd] = "ds-new"
			u.SetLabels(labels)
		})
	}
	on(nsA, "one", old)
	on(nsB, "two", old)

	move(nsA)
	on(nsA, "one", moved)
	waitObject(t, cluster.DataStoreGVK, "", moved, nil)
	if object(t, cluster.DataStoreGVK, "", old) == nil {
		t.Fatal("the DataStore went while a cluster still uses it")
	}
	move(nsB)
	on(nsB, "two", moved)
	eventually(t, "DataStore "+old+" deleted", func() (bool, error) {
		return object(t, cluster.DataStoreGVK, "", old) == nil, nil
	})
}

// A DataStore of the name an etcd's needs, made by someone else, is neither changed nor adopted
// nor deleted; the cluster is Stalled naming it, and nothing is made.
func TestForeignDataStoreIsLeftAlone(t *testing.T) {
	ns := tenantNamespace(t, "ds-foreign", "ds-foreign-etcd")
	foreign := cluster.DataStore("ds-foreign-etcd")
	foreign.SetLabels(map[string]string{"owner": "someone-else"})
	if err := k8s.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	create(t, makeCluster(ns, "squatted").obj())
	kc := condition(t, ns, "squatted", fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.ConflictReason)
	if msg := meta.FindStatusCondition(kc.Status.Conditions, clusterapi.ControlPlaneReadyCondition).Message; !strings.Contains(msg, "DataStore") {
		t.Errorf("ControlPlaneReady does not name the DataStore in the way: %q", msg)
	}
	if object(t, cluster.KamajiControlPlaneGVK, ns, cluster.ControlPlaneName("squatted")) != nil {
		t.Error("a control plane was made on a DataStore someone else made")
	}
	deleteAndWait(t, ns, "squatted")
	got := object(t, cluster.DataStoreGVK, "", foreign.GetName())
	if got == nil || got.GetLabels()["owner"] != "someone-else" || got.GetLabels()[clusterapi.LabelEtcdNamespace] != "" {
		t.Errorf("the foreign DataStore was changed or deleted: %v", got)
	}
}

// A node group naming a StorageClass that does not exist stalls the cluster naming the field, and
// nothing is made; once the class exists, the cluster proceeds.
func TestUnknownStorageClassStallsUntilItExists(t *testing.T) {
	ns := tenantNamespace(t, "storage", "storage")
	kc := makeCluster(ns, "disks").obj()
	kc.Spec.NodeGroups[0].StorageClass = "fast-nvme"
	create(t, kc)
	stalledOnReference(t, ns, "disks", "spec.nodeGroups[default].storageClass")
	storageClass(t, "fast-nvme")
	waitObject(t, cluster.MachineDeploymentGVK, ns, "disks-default", nil)
	condition(t, ns, "disks", clusterapi.WorkersReadyCondition, metav1.ConditionFalse, clusterapi.ProgressingReason)
}

// stalledOnReference waits until the cluster is stalled on a reference whose message holds want,
// and checks that nothing was made for it.
func stalledOnReference(t *testing.T, ns, name, want string) {
	t.Helper()
	kc := condition(t, ns, name, fmeta.StalledCondition, metav1.ConditionTrue, clusterapi.UnknownReferenceReason)
	if msg := meta.FindStatusCondition(kc.Status.Conditions, fmeta.StalledCondition).Message; !strings.Contains(msg, want) {
		t.Errorf("Stalled says %q, want it to name %q", msg, want)
	}
	if object(t, cluster.ClusterGVK, ns, name) != nil {
		t.Errorf("objects were made for %s/%s while it stalled", ns, name)
	}
}

// A cluster's scheduling class must exist and must not contradict its tenant's: either stalls the
// cluster naming the field, and nothing is made. Once the class exists, the control plane's pods
// and the worker VMs carry it, for the storage-controller to place them.
func TestSchedulingClassMustExistAndPlacesTheCluster(t *testing.T) {
	ns := tenantNamespace(t, "placed", "placed")
	kc := makeCluster(ns, "zonal").obj()
	kc.Spec.SchedulingClass = "one-zone"
	create(t, kc)
	stalledOnReference(t, ns, "zonal", "spec.schedulingClass")

	schedulingClass(t, "one-zone")
	cp := waitObject(t, cluster.KamajiControlPlaneGVK, ns, cluster.ControlPlaneName("zonal"), nil)
	if got, _, _ := unstructured.NestedString(cp.Object, "spec", "deployment", "podAdditionalMetadata", "annotations", storagepolicyv1.AnnotationSchedulingClass); got != "one-zone" {
		t.Errorf("the control plane's pods are annotated with scheduling class %q, want one-zone", got)
	}
	md := waitObject(t, cluster.MachineDeploymentGVK, ns, "zonal-default", nil)
	tmpl, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "name")
	vm := object(t, cluster.KubevirtMachineTmplGVK, ns, tmpl)
	if got, _, _ := unstructured.NestedString(vm.Object, "spec", "template", "spec", "virtualMachineTemplate", "spec", "template", "metadata", "annotations", storagepolicyv1.AnnotationSchedulingClass); got != "one-zone" {
		t.Errorf("the worker VMs are annotated with scheduling class %q, want one-zone", got)
	}

	// The tenant's namespace is placed by another class: its pods cannot follow the cluster's.
	other := tenantNamespace(t, "placed-elsewhere", "placed-elsewhere")
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: other}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[tenancyv1.LabelSchedulingClass] = "two-zones"
	if err := k8s.Update(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
	kc = makeCluster(other, "zonal").obj()
	kc.Spec.SchedulingClass = "one-zone"
	create(t, kc)
	stalledOnReference(t, other, "zonal", `spec.schedulingClass "one-zone": namespace placed-elsewhere is placed by its tenant's scheduling class "two-zones"`)
}

// A node group's change makes new templates (their names follow their content). The superseded
// ones go once Cluster API has seen the MachineDeployment name the new ones and no MachineSet
// names them any more: a MachineSet of the earlier revision keeps its template while it exists.
func TestSupersededTemplatesGoOnceNothingUsesThem(t *testing.T) {
	const infraRef, bootRef = "spec.template.spec.infrastructureRef.name", "spec.template.spec.bootstrap.configRef.name"
	path := func(p string) []string { return strings.Split(p, ".") }
	ns := tenantNamespace(t, "revisions", "revisions")
	create(t, makeCluster(ns, "rev").obj())
	p := providerStandIn{t}
	md := waitObject(t, cluster.MachineDeploymentGVK, ns, "rev-default", nil)
	oldInfra, oldBoot := str(md, path(infraRef)...), str(md, path(bootRef)...)
	p.workersReady(ns, "rev-default", 1)
	// Cluster API's MachineSet of this revision: it makes machines of the old machine template,
	// with bootstrap data of its own (it names no bootstrap template).
	set := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"clusterName": "rev",
		"selector":    map[string]any{"matchLabels": map[string]any{clusterapi.LabelNodeGroup: "default"}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{clusterapi.LabelNodeGroup: "default"}},
			"spec": map[string]any{"clusterName": "rev", "bootstrap": map[string]any{"dataSecretName": "rev-default-data"},
				"infrastructureRef": map[string]any{"apiGroup": cluster.KubevirtMachineTmplGVK.Group, "kind": cluster.KubevirtMachineTmplGVK.Kind, "name": oldInfra}},
		},
	}}}
	set.SetGroupVersionKind(cluster.MachineSetGVK)
	set.SetNamespace(ns)
	set.SetName("rev-default-1")
	set.SetLabels(map[string]string{"cluster.x-k8s.io/cluster-name": "rev"})
	if err := k8s.Create(context.Background(), set); err != nil {
		t.Fatal(err)
	}

	if err := update(t, ns, "rev", func(kc *clusterapi.KubernetesCluster) {
		kc.Spec.NodeGroups[0].InstanceType = "large"
		kc.Spec.NodeGroups[0].Labels = map[string]clusterapi.LabelValue{"tier": "web"}
	}); err != nil {
		t.Fatal(err)
	}
	md = waitObject(t, cluster.MachineDeploymentGVK, ns, "rev-default", func(u *unstructured.Unstructured) bool { return str(u, path(infraRef)...) != oldInfra })
	newInfra, newBoot := str(md, path(infraRef)...), str(md, path(bootRef)...)
	if newBoot == oldBoot {
		t.Fatal("the node labels did not make a new bootstrap template")
	}
	// Until Cluster API has seen the new revision, both old templates stay.
	if object(t, cluster.KubevirtMachineTmplGVK, ns, oldInfra) == nil || object(t, cluster.KubeadmConfigTemplateGVK, ns, oldBoot) == nil {
		t.Fatal("a superseded template went before Cluster API saw the MachineDeployment name its successor")
	}
	p.workersReady(ns, "rev-default", 1)
	eventually(t, "the superseded bootstrap template, which no MachineSet names, to go", func() (bool, error) {
		return object(t, cluster.KubeadmConfigTemplateGVK, ns, oldBoot) == nil, nil
	})
	if object(t, cluster.KubevirtMachineTmplGVK, ns, oldInfra) == nil {
		t.Error("the machine template of a MachineSet that still exists went")
	}
	if err := k8s.Delete(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the superseded machine template to go with its MachineSet", func() (bool, error) {
		return object(t, cluster.KubevirtMachineTmplGVK, ns, oldInfra) == nil, nil
	})
	if object(t, cluster.KubevirtMachineTmplGVK, ns, newInfra) == nil || object(t, cluster.KubeadmConfigTemplateGVK, ns, newBoot) == nil {
		t.Error("a template the MachineDeployment names went")
	}
}

// Add-ons: AddonsReady follows the HelmReleases' own Ready at their generation; an add-on turned
// off goes (and the add-ons' source with the last one); on deletion the add-ons go after the
// workers and before the control plane, whose kubeconfig helm-controller needs to uninstall them.
func TestAddonsReadyPruneAndDeletionOrder(t *testing.T) {
	ns := tenantNamespace(t, "addons", "addons")
	b := makeCluster(ns, "web")
	b.kc.Spec.Addons = clusterapi.Addons{Ingress: true, Monitoring: true}
	create(t, b.obj())
	hr := cluster.AddonReleaseName("web", "ingress")
	waitObject(t, cluster.HelmReleaseGVK, ns, hr, nil)
	kc := condition(t, ns, "web", clusterapi.AddonsReadyCondition, metav1.ConditionFalse, clusterapi.WaitingReason)
	if msg := meta.FindStatusCondition(kc.Status.Conditions, clusterapi.AddonsReadyCondition).Message; !strings.Contains(msg, "0/4 add-ons installed") {
		t.Errorf("AddonsReady: %q", msg)
	}
	access := &corev1.Secret{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: cluster.AddonsName("web")}, access); err != nil || access.Type != "addons.cluster.x-k8s.io/resource-set" {
		t.Fatalf("the add-ons' ClusterResourceSet Secret: %v %v", access.Type, err)
	}
	providerStandIn{t}.addonsInstalled(ns, "web")
	condition(t, ns, "web", clusterapi.AddonsReadyCondition, metav1.ConditionTrue, "")

	if err := update(t, ns, "web", func(kc *clusterapi.KubernetesCluster) { kc.Spec.Addons.Monitoring = false }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the monitoring add-on gone", func() (bool, error) {
		return object(t, cluster.HelmReleaseGVK, ns, cluster.AddonReleaseName("web", "monitoring")) == nil, nil
	})
	if object(t, cluster.HelmRepositoryGVK, ns, cluster.AddonsName("web")) == nil {
		t.Error("the add-ons' source went while an add-on remains")
	}

	// helm-controller holds a HelmRelease while it uninstalls: a finalizer plays that.
	updateObject(t, cluster.HelmReleaseGVK, ns, hr, func(u *unstructured.Unstructured) {
		u.SetFinalizers([]string{"test.flotilla.dev/uninstalling"})
	})
	if err := k8s.Delete(context.Background(), get(t, ns, "web")); err != nil {
		t.Fatal(err)
	}
	waitObject(t, cluster.HelmReleaseGVK, ns, hr, func(u *unstructured.Unstructured) bool { return !u.GetDeletionTimestamp().IsZero() })
	if object(t, cluster.MachineDeploymentGVK, ns, "web-default") != nil {
		t.Error("the add-ons are deleted while workers remain")
	}
	if u := object(t, cluster.KamajiControlPlaneGVK, ns, "web-control-plane"); u == nil || !u.GetDeletionTimestamp().IsZero() {
		t.Error("the control plane is deleted while an add-on uninstalls")
	}
	updateObject(t, cluster.HelmReleaseGVK, ns, hr, func(u *unstructured.Unstructured) { u.SetFinalizers(nil) })
	eventually(t, "cluster gone", func() (bool, error) {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, &clusterapi.KubernetesCluster{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
