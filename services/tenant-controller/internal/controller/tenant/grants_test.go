package tenant_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// The chart's namespace grants give a platform component's ServiceAccount its ClusterRole's
// rights in every tenant namespace, the root's included, and nowhere else: the cluster-controller
// reads its clusters' kubeconfig Secrets in tenant namespaces, not the platform's own.
func TestNamespaceGrantsReachTenantNamespacesOnly(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	grants, err := chartNamespaceGrants()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(grants).NotTo(BeEmpty(), "the chart's default namespaceGrants")
	grant := grants[0]
	// The ClusterRole the cluster-controller's chart ships under that name (secrets, as there).
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: grant.ClusterRole},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "patch"}}}}
	g.Expect(k8s.Create(ctx, role)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(ctxFor(t), role) })

	rootTenant(t)
	store := MakeTenant("gstore", "tenant-root").Quota("cpu", "1").Quota("count/pods", "2").Obj()
	shop := MakeTenant("gshop", "tenant-gstore").Quota("cpu", "1").Quota("count/pods", "1").Obj()
	createAll(ctx, g, store, shop)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), store, shop) })
	eventuallyCurrent(ctx, g, store, shop)

	user := serviceaccount.MakeUsername(grant.ServiceAccount.Namespace, grant.ServiceAccount.Name)
	may := func(ns string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: serviceaccount.MakeGroupNames(grant.ServiceAccount.Namespace),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"}}}
		g.Expect(k8s.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed
	}
	for _, ns := range []string{"tenant-root", "tenant-gstore", "tenant-gstore-gshop"} {
		rb := &rbacv1.RoleBinding{}
		g.Eventually(func() error {
			return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: tenancy.GrantRoleBindingName(grant)}, rb)
		}).WithTimeout(30*time.Second).Should(Succeed(), ns)
		g.Expect(rb.RoleRef.Name).To(Equal(grant.ClusterRole))
		g.Expect(rb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind,
			Namespace: grant.ServiceAccount.Namespace, Name: grant.ServiceAccount.Name}))
		g.Eventually(func() bool { return may(ns) }).WithTimeout(10*time.Second).Should(BeTrue(), "%s reads Secrets in %s", user, ns)
	}
	for _, ns := range []string{"default", "kube-system", grant.ServiceAccount.Namespace, tenancyv1.DeliveryNamespace("tenant-gstore")} {
		g.Expect(may(ns)).To(BeFalse(), "%s reads Secrets in %s, which is no tenant namespace", user, ns)
	}

	// A grant's binding deleted by someone (a tenant admin may manage RBAC) is put back.
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-gstore", Name: tenancy.GrantRoleBindingName(grant)}}
	g.Expect(k8s.Delete(ctx, rb)).To(Succeed())
	g.Eventually(func() error { return k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-gstore", Name: rb.Name}, rb) }).
		WithTimeout(30 * time.Second).Should(Succeed())
}
