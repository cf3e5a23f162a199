package tenant_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Every tenant namespace caps the object counts of the chart's defaults, so that no tenant fills
// etcd with objects nobody thought to count; a count the tenant declares is its own, granted
// down the tree, and the server refuses the object past it, naming the quota.
func TestObjectCountsCapEveryTenantNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	counts, err := chartObjectCounts()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(counts).To(HaveKey(corev1.ResourceName("count/tenants.tenancy.flotilla.dev")))

	store := MakeTenant("store", "tenant-root").Quota("cpu", "2").Quota("count/pods", "10").Quota("count/configmaps", "2").Obj()
	shop := MakeTenant("shop", "tenant-store").Quota("cpu", "1").Quota("count/pods", "5").Quota("count/configmaps", "1").Obj()
	createAll(ctx, g, store, shop)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), store, shop) })
	eventuallyCurrent(ctx, g, store, shop)

	// What each declares, less what its children declare; the defaults for every other count.
	declared := corev1.ResourceList{"count/configmaps": apiresource.MustParse("1"), "count/pods": apiresource.MustParse("5")}
	for _, ns := range []string{"tenant-store", "tenant-store-shop"} {
		rq := &corev1.ResourceQuota{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "flotilla-tenant"}, rq)).To(Succeed())
		for name, want := range counts {
			if d, ok := declared[name]; ok {
				want = d
			}
			got := rq.Spec.Hard[name]
			g.Expect(got.Cmp(want)).To(Equal(0), "%s: hard %s = %s, want %s", ns, name, got.String(), want.String())
		}
	}
	root := &corev1.ResourceQuota{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-root", Name: "flotilla-tenant"}, root)).To(Succeed())
	g.Expect(root.Spec.Hard).NotTo(HaveKey(corev1.ResourceName("count/configmaps")),
		"the root tenant's namespace is the provider's: only what the root declares")

	// store's administrator: one ConfigMap fits store's own share (2, less shop's 1); the second
	// is refused by kube-apiserver's quota admission, which names the quota and the count.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "ann", Groups: []string{"tenant-store-admin"}}
	ann, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-store"}}
	}
	g.Eventually(func() error {
		_, err := ann.CoreV1().ConfigMaps("tenant-store").Create(ctx, cm("first"), metav1.CreateOptions{})
		return err
	}).WithTimeout(30 * time.Second).Should(Succeed())
	_, err = ann.CoreV1().ConfigMaps("tenant-store").Create(ctx, cm("second"), metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a ConfigMap past the count: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("exceeded quota: flotilla-tenant"))
	g.Expect(err.Error()).To(ContainSubstring("limited: count/configmaps=1"))

	// A tenant of a kind counted by default (a Tenant, a custom resource) is counted and created.
	cart := MakeTenant("cart", "tenant-store-shop").Quota("cpu", "0").Quota("count/pods", "0").Quota("count/configmaps", "0").Obj()
	g.Eventually(func() error { return k8s.Create(ctx, cart.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), cart) })
	g.Eventually(func() string {
		rq := &corev1.ResourceQuota{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-store-shop", Name: "flotilla-tenant"}, rq); err != nil {
			return err.Error()
		}
		used := rq.Status.Used["count/tenants.tenancy.flotilla.dev"]
		return used.String()
	}).WithTimeout(time.Minute).Should(Equal("1"))
}
