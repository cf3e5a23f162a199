package tenant_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A tenant's apps are installed as its delivery identity, which lives in a delivery namespace
// the controller makes for the tenant. The identity may do what charts do in the tenant's own
// namespace and keep Helm's records in the delivery namespace; nothing in a sibling's namespace,
// nothing cluster-wide. The tenant's own administrators cannot reach it: they cannot read the
// delivery namespace, ask a token for the identity or act as it.
func TestAttackObtainDeliveryIdentity(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	acme := MakeTenant("delacme", "tenant-root").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	beta := MakeTenant("delbeta", "tenant-root").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	createAll(ctx, g, acme, beta)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), acme, beta) })
	eventuallyCurrent(ctx, g, acme, beta)
	const tenantNS, deliveryNS, betaNS = "tenant-delacme", "apps-delacme", "tenant-delbeta"
	g.Expect(condition(get(ctx, g, acme), tenancyv1.DeliveryReadyCondition).Status).To(Equal(metav1.ConditionTrue))

	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: deliveryNS}, ns)).To(Succeed())
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelDeliveryFor, tenantNS))
	sa := &corev1.ServiceAccount{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: deliveryNS, Name: tenancyv1.DeliveryServiceAccount}, sa)).To(Succeed())

	// What the identity may do, asked of the real authorizer.
	identity := "system:serviceaccount:" + deliveryNS + ":" + tenancyv1.DeliveryServiceAccount
	may := func(ns, verb, group, resource string) bool {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: identity, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deliveryNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
		}}
		g.Expect(k8s.Create(ctx, review)).To(Succeed())
		return review.Status.Allowed
	}
	g.Eventually(func() bool { return may(tenantNS, "create", "apps", "statefulsets") }).WithTimeout(30 * time.Second).Should(BeTrue())
	g.Expect(may(deliveryNS, "create", "", "secrets")).To(BeTrue(), "Helm's release records")
	g.Expect(may(betaNS, "create", "", "configmaps")).To(BeFalse(), "a sibling's namespace")
	g.Expect(may("", "create", "rbac.authorization.k8s.io", "clusterrolebindings")).To(BeFalse(), "cluster-wide")
	g.Expect(may(tenantNS, "create", "rbac.authorization.k8s.io", "rolebindings")).To(BeFalse(), "grants in the tenant")
	g.Expect(may(tenantNS, "create", "", "pods")).To(BeFalse(), "running workloads itself")

	// acme's administrator tries every way to the identity or its records.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: []string{"tenant-delacme-admin"}}
	mallory, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error {
		_, err := mallory.CoreV1().ConfigMaps(tenantNS).List(ctx, metav1.ListOptions{})
		return err
	}).WithTimeout(30 * time.Second).Should(Succeed())
	_, err = mallory.CoreV1().Secrets(deliveryNS).List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading Helm's release records: %v", err)
	_, err = mallory.CoreV1().ServiceAccounts(deliveryNS).CreateToken(ctx, tenancyv1.DeliveryServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a token for the identity: %v", err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: deliveryNS},
		Spec: corev1.PodSpec{ServiceAccountName: tenancyv1.DeliveryServiceAccount, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	_, err = mallory.CoreV1().Pods(deliveryNS).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a pod running as the identity: %v", err)
	// A ServiceAccount of the same name in the tenant's own namespace is another identity, with
	// none of the delivery identity's rights.
	_, err = mallory.CoreV1().ServiceAccounts(tenantNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.DeliveryServiceAccount}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(may(deliveryNS, "get", "", "secrets")).To(BeTrue())
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + tenantNS + ":" + tenancyv1.DeliveryServiceAccount,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: deliveryNS, Verb: "get", Resource: "secrets"},
	}}
	g.Expect(k8s.Create(ctx, review)).To(Succeed())
	g.Expect(review.Status.Allowed).To(BeFalse(), "the look-alike in the tenant's namespace reads the records")
	// Impersonation is asked of the caller: mallory may not impersonate anyone.
	rb := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "mallory", Groups: []string{"tenant-delacme-admin"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: deliveryNS, Verb: "impersonate", Resource: "serviceaccounts", Name: tenancyv1.DeliveryServiceAccount},
	}}
	g.Expect(k8s.Create(ctx, rb)).To(Succeed())
	g.Expect(rb.Status.Allowed).To(BeFalse(), "impersonating the identity")
	// Nor can a tenant's super-admin bind the delivery role to itself elsewhere.
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: deliveryNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tenancyv1.DeliveryStorageClusterRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}}
	_, err = mallory.RbacV1().RoleBindings(deliveryNS).Create(ctx, binding, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a binding in the delivery namespace: %v", err)
}

// A namespace named like a tenant's delivery namespace that the controller did not make is never
// taken over: the tenant says so and is Stalled.
func TestDeliveryNamespaceIsNotAdopted(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	squatted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps-squatted", Labels: map[string]string{"team": "other"}}}
	g.Expect(k8s.Create(ctx, squatted)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(ctxFor(t), squatted) })
	tn := MakeTenant("squatted", "tenant-root").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	createAll(ctx, g, tn)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), tn) })
	g.Eventually(func(g Gomega) {
		c := condition(get(ctx, g, tn), tenancyv1.DeliveryReadyCondition)
		g.Expect(c.Reason).To(Equal(tenancyv1.NamespaceConflictReason))
		g.Expect(condition(get(ctx, g, tn), "Stalled").Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	cur := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(squatted), cur)).To(Succeed())
	g.Expect(cur.Labels).To(Equal(map[string]string{"team": "other", corev1.LabelMetadataName: "apps-squatted"}))
	g.Expect(cur.Annotations).NotTo(HaveKey(tenancyv1.AnnotationOwnerUID))
}
