package tenant_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

const hold = "example.com/hold"

// heldTree builds name → child with a ConfigMap carrying another operator's finalizer in the
// child's namespace, and starts deleting the whole subtree.
func heldTree(ctx context.Context, t *testing.T, g Gomega, name string) (*tenancyv1.Tenant, *tenancyv1.Tenant, *corev1.ConfigMap) {
	parent, child := tree(ctx, t, g, name)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "tenant-" + name + "-child", Finalizers: []string{hold}}}
	g.Expect(k8s.Create(ctx, cm)).To(Succeed())
	g.Expect(k8s.Delete(ctx, parent)).To(Succeed())
	return parent, child, cm
}

// tree builds root → name → child and waits until both are current.
func tree(ctx context.Context, t *testing.T, g Gomega, name string) (*tenancyv1.Tenant, *tenancyv1.Tenant) {
	rootTenant(t)
	parent := MakeTenant(name, "tenant-root").Quota("cpu", "2").Quota("count/pods", "10").Obj()
	child := MakeTenant("child", "tenant-"+name).Quota("cpu", "1").Quota("count/pods", "5").Obj()
	createAll(ctx, g, parent, child)
	eventuallyCurrent(ctx, g, parent, child)
	return parent, child
}

func release(ctx context.Context, g Gomega, cm *corev1.ConfigMap) {
	cur := &corev1.ConfigMap{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cur)).To(Succeed())
	cur.Finalizers = nil
	g.Expect(k8s.Update(ctx, cur)).To(Succeed())
}

func TestDeletionNamesWhatBlocksItAndCompletes(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	parent, child, cm := heldTree(ctx, t, g, "del")

	// The child says what holds its namespace, read from the namespace's own status; the parent
	// says it waits for the child.
	g.Eventually(func(g Gomega) {
		c := get(ctx, g, child)
		g.Expect(condition(c, "Ready").Reason).To(Equal("Deleting"))
		g.Expect(condition(c, tenancyv1.NamespaceReadyCondition).Message).To(ContainSubstring(hold))
		g.Expect(condition(get(ctx, g, parent), "Ready").Message).To(ContainSubstring("Waiting for child tenants to be deleted: child"))
	}).WithTimeout(60 * time.Second).Should(Succeed())
	// Nothing of another operator's is touched.
	cur := &corev1.ConfigMap{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cur)).To(Succeed())
	g.Expect(cur.Finalizers).To(ConsistOf(hold))

	release(ctx, g, cm)
	deleteTree(ctx, g, child, parent)
	for _, ns := range []string{"tenant-del", "tenant-del-child"} {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))
		}).WithTimeout(60*time.Second).Should(BeTrue(), ns)
	}
}

func TestDeletionConvergesAcrossARestart(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	parent, child, cm := heldTree(ctx, t, g, "restart")
	g.Eventually(func(g Gomega) {
		g.Expect(condition(get(ctx, g, child), tenancyv1.NamespaceReadyCondition).Message).To(ContainSubstring(hold))
	}).WithTimeout(60 * time.Second).Should(Succeed())

	// The controller goes away mid-deletion; the blocker is lifted while it is down.
	stopManager()
	release(ctx, g, cm)
	g.Expect(startManager()).To(Succeed())
	deleteTree(ctx, g, child, parent)
}

func TestNamespaceNotCreatedByTheControllerIsKept(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-legacy",
		Labels: map[string]string{"team": "legacy"}}})).To(Succeed())
	legacy := MakeTenant("legacy", "tenant-root").Quota("cpu", "1").Quota("count/pods", "1").Obj()
	createAll(ctx, g, legacy)
	eventuallyCurrent(ctx, g, legacy)
	deleteTree(ctx, g, legacy)

	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tenant-legacy"}, ns)).To(Succeed())
	g.Expect(ns.DeletionTimestamp).To(BeNil())
	g.Expect(ns.Labels).To(HaveKeyWithValue("team", "legacy"))
	g.Expect(ns.Labels).NotTo(HaveKey(tenancyv1.LabelTenant))
	rbs := &corev1.ResourceQuotaList{}
	g.Expect(k8s.List(ctx, rbs, client.InNamespace("tenant-legacy"))).To(Succeed())
	g.Expect(rbs.Items).To(BeEmpty())
	g.Expect(k8s.Delete(ctx, ns)).To(Succeed())
}

// An app with deletion protection (its HelmRelease labelled so by the apps API) keeps its
// tenant's namespace: deleting the parent tenant, as deleting a Tenant app does, stops at the
// child, which names the app, and nothing in the namespace is touched until the protection is
// cleared.
func TestProtectedAppsKeepTheirNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	parent, child := tree(ctx, t, g, "guarded")
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": "pg-orders", "namespace": "apps-guarded-child", "labels": map[string]any{
			fmeta.LabelAppKind: "Postgres", fmeta.LabelAppName: "orders", fmeta.LabelDeletionProtection: "true"}},
		"spec": map[string]any{"interval": "10m", "chart": map[string]any{"spec": map[string]any{
			"chart": "postgres", "sourceRef": map[string]any{"kind": "HelmRepository", "name": "catalog"}}}},
	}}
	g.Expect(k8s.Create(ctx, app)).To(Succeed())
	g.Expect(k8s.Delete(ctx, parent)).To(Succeed())

	g.Eventually(func(g Gomega) {
		c := condition(get(ctx, g, child), tenancyv1.NamespaceReadyCondition)
		g.Expect(c.Reason).To(Equal(tenancyv1.DeletionBlockedReason))
		g.Expect(c.Message).To(ContainSubstring("holds apps with deletion protection: Postgres orders"))
		g.Expect(condition(get(ctx, g, parent), "Ready").Message).To(ContainSubstring("Waiting for child tenants to be deleted: child"))
	}).WithTimeout(60 * time.Second).Should(Succeed())
	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tenant-guarded-child"}, ns)).To(Succeed())
	g.Expect(ns.DeletionTimestamp).To(BeNil())
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(app), app)).To(Succeed())

	// Clearing the protection lets the deletion finish.
	g.Expect(k8s.Patch(ctx, app, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+fmeta.LabelDeletionProtection+`":null}}}`)))).To(Succeed())
	deleteTree(ctx, g, child, parent)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: "tenant-guarded-child"}, &corev1.Namespace{}))
	}).WithTimeout(60 * time.Second).Should(BeTrue())
}
