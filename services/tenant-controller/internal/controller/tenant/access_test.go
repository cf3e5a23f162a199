package tenant_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// Access is checked the way the API server checks it: by impersonating tenant users.
func TestAccessFollowsTheTree(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	acme := MakeTenant("acme", "tenant-root").Quota("cpu", "10").Quota("count/pods", "100").Grant(tenancyv1.RoleView, "bob").Obj()
	dev := MakeTenant("dev", "tenant-acme").Quota("cpu", "2").Quota("count/pods", "10").Obj()
	beta := MakeTenant("beta", "tenant-root").Quota("cpu", "2").Quota("count/pods", "10").Obj()
	createAll(ctx, g, acme, dev, beta)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), acme, beta) })
	eventuallyCurrent(ctx, g, acme, dev, beta)
	for _, ns := range []string{"tenant-acme-dev", "tenant-beta", "tenant-root"} {
		g.Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}})).To(Succeed())
	}

	acmeAdmin, err := env.As("alice", "tenant-acme-admin")
	g.Expect(err).NotTo(HaveOccurred())
	// Ancestors see down (eventually: the roles are aggregated by kube-controller-manager).
	g.Eventually(func() error {
		return acmeAdmin.Get(ctx, client.ObjectKey{Namespace: "tenant-acme-dev", Name: "probe"}, &corev1.ConfigMap{})
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(acmeAdmin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "tenant-acme-dev"}})).To(Succeed())
	// … never up, never sideways, never cluster-wide.
	g.Expect(apierrors.IsForbidden(acmeAdmin.Get(ctx, client.ObjectKey{Namespace: "tenant-beta", Name: "probe"}, &corev1.ConfigMap{}))).To(BeTrue())
	g.Expect(apierrors.IsForbidden(acmeAdmin.Get(ctx, client.ObjectKey{Namespace: "tenant-root", Name: "probe"}, &corev1.ConfigMap{}))).To(BeTrue())
	g.Expect(apierrors.IsForbidden(acmeAdmin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "escape"}}))).To(BeTrue())
	// Tenant admins may not loosen the platform's quota or isolation.
	rq := &corev1.ResourceQuota{}
	g.Expect(acmeAdmin.Get(ctx, client.ObjectKey{Namespace: "tenant-acme-dev", Name: "flotilla-tenant"}, rq)).To(Succeed())
	g.Expect(apierrors.IsForbidden(acmeAdmin.Delete(ctx, rq))).To(BeTrue())

	// The dev tenant's own admins see only dev.
	devAdmin, err := env.As("carol", "tenant-acme-dev-admin")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(devAdmin.Get(ctx, client.ObjectKey{Namespace: "tenant-acme-dev", Name: "probe"}, &corev1.ConfigMap{})).To(Succeed())
	g.Expect(apierrors.IsForbidden(devAdmin.Get(ctx, client.ObjectKey{Namespace: "tenant-acme", Name: "flotilla-tenant"}, &corev1.ResourceQuota{}))).To(BeTrue())

	// Extra subjects from spec.access are inherited too, with their role only.
	bob, err := env.As("bob")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bob.Get(ctx, client.ObjectKey{Namespace: "tenant-acme-dev", Name: "probe"}, &corev1.ConfigMap{})).To(Succeed())
	g.Expect(apierrors.IsForbidden(bob.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "no", Namespace: "tenant-acme-dev"}}))).To(BeTrue())
	g.Expect(apierrors.IsForbidden(bob.Get(ctx, client.ObjectKey{Namespace: "tenant-acme-dev", Name: "x"}, &corev1.Secret{}))).To(BeTrue())

	// Removing the grant takes the access away again.
	cur := get(ctx, g, acme)
	cur.Spec.Access = nil
	g.Expect(k8s.Update(ctx, cur)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsForbidden(bob.Get(ctx, client.ObjectKey{Namespace: "tenant-acme-dev", Name: "probe"}, &corev1.ConfigMap{}))
	}).WithTimeout(30 * time.Second).Should(BeTrue())
	_ = k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "tenant-root"}})
}
