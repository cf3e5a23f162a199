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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A tenant's apps are each installed as its own identity, a ServiceAccount of the delivery
// namespace the controller makes for the tenant. The identities may do what charts do in the
// tenant's own namespace and keep Helm's records in the delivery namespace; nothing in a sibling's
// namespace, nothing cluster-wide. The tenant's own administrators cannot reach them: they cannot
// read the delivery namespace, ask a token for an identity or act as one.
func TestAttackObtainDeliveryIdentity(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	acme := MakeTenant("delacme", "tenant-root").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	beta := MakeTenant("delbeta", "tenant-root").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	createAll(ctx, g, acme, beta)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), acme, beta) })
	eventuallyCurrent(ctx, g, acme, beta)
	const tenantNS, deliveryNS, betaNS, app = "tenant-delacme", "apps-delacme", "tenant-delbeta", "redis-cache"
	g.Expect(condition(get(ctx, g, acme), tenancyv1.DeliveryReadyCondition).Status).To(Equal(metav1.ConditionTrue))

	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: deliveryNS}, ns)).To(Succeed())
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelDeliveryFor, tenantNS))
	accounts := &corev1.ServiceAccountList{}
	g.Expect(k8s.List(ctx, accounts, client.InNamespace(deliveryNS))).To(Succeed())
	g.Expect(accounts.Items).To(BeEmpty(), "the tenant-controller makes no ServiceAccount there: each app's is the app catalog's")

	// What an app's identity may do, asked of the real authorizer.
	identity := "system:serviceaccount:" + deliveryNS + ":" + app
	may := func(ns, verb, group, resource string) bool {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: identity, Groups: []string{"system:serviceaccounts", tenancyv1.DeliveryGroup(deliveryNS), "system:authenticated"},
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
	_, err = mallory.CoreV1().ServiceAccounts(deliveryNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: app}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "making a ServiceAccount there: %v", err)
	_, err = mallory.CoreV1().ServiceAccounts(deliveryNS).CreateToken(ctx, app,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a token for the identity: %v", err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: deliveryNS},
		Spec: corev1.PodSpec{ServiceAccountName: app, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	_, err = mallory.CoreV1().Pods(deliveryNS).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a pod running as the identity: %v", err)
	// A ServiceAccount of the same name in the tenant's own namespace is another identity, with
	// none of the app identity's rights.
	_, err = mallory.CoreV1().ServiceAccounts(tenantNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: app}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(may(deliveryNS, "get", "", "secrets")).To(BeTrue())
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:" + tenantNS + ":" + app, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + tenantNS},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: deliveryNS, Verb: "get", Resource: "secrets"},
	}}
	g.Expect(k8s.Create(ctx, review)).To(Succeed())
	g.Expect(review.Status.Allowed).To(BeFalse(), "the look-alike in the tenant's namespace reads the records")
	// Impersonation is asked of the caller: mallory may not impersonate anyone.
	rb := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "mallory", Groups: []string{"tenant-delacme-admin"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: deliveryNS, Verb: "impersonate", Resource: "serviceaccounts", Name: app},
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

// Each app's identity writes only its own release's objects (policy flotilla-app-identity): the
// objects helm-controller labels with its HelmRelease, and its own Helm records. Another app of
// the same tenant, in the same namespaces with the same roles, can neither change, delete nor take
// them over, nor plant a record under its name; the namespace's default ServiceAccount writes
// nothing.
func TestAppIdentityWritesOnlyItsOwnRelease(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	acme := MakeTenant("idacme", "tenant-root").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	createAll(ctx, g, acme)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), acme) })
	eventuallyCurrent(ctx, g, acme)
	const tenantNS, deliveryNS = "tenant-idacme", "apps-idacme"
	as := func(name string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + deliveryNS + ":" + name}
		c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	victim, attacker := as("redis-victim"), as("redis-attacker")
	labelled := func(obj client.Object, release string) client.Object {
		obj.SetLabels(map[string]string{"helm.toolkit.fluxcd.io/name": release, "helm.toolkit.fluxcd.io/namespace": deliveryNS})
		return obj
	}
	refused := func(err error, says ...string) {
		g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue(), "want 403, got %v", err)
		for _, s := range append(says, tenancyv1.AppIdentityPolicy) {
			g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(s))
		}
	}

	// kube-apiserver loads a new policy a moment after it is created: probe with a harmless object.
	g.Eventually(func() error {
		return victim.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: tenantNS}})
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(tenancyv1.AppIdentityPolicy)))
	secret := labelled(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "victim-password", Namespace: tenantNS},
		StringData: map[string]string{"password": "s3cret"}}, "redis-victim").(*corev1.Secret)
	g.Expect(victim.Create(ctx, secret)).To(Succeed())
	claim := labelled(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "victim-data", Namespace: tenantNS},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
		"redis-victim").(*corev1.PersistentVolumeClaim)
	g.Expect(victim.Create(ctx, claim)).To(Succeed())
	record := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.redis-victim.v1", Namespace: deliveryNS,
		Labels: map[string]string{"owner": "helm", "name": "redis-victim"}}}
	g.Expect(victim.Create(ctx, record)).To(Succeed())
	g.Expect(victim.Patch(ctx, secret, client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"password":"rotated"}}`)))).To(Succeed())

	// The attacker, with the same roles in the same namespaces.
	refused(attacker.Patch(ctx, secret, client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"password":"mine"}}`))),
		"secrets victim-password belongs to the app redis-victim, not to redis-attacker")
	refused(attacker.Delete(ctx, claim), "persistentvolumeclaims victim-data belongs to the app redis-victim")
	adopt := []byte(`{"metadata":{"labels":{"helm.toolkit.fluxcd.io/name":"redis-attacker"}}}`)
	refused(attacker.Patch(ctx, claim, client.RawPatch(types.MergePatchType, adopt)), "belongs to the app redis-victim")
	refused(attacker.Create(ctx, labelled(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "planted", Namespace: tenantNS}}, "redis-victim")),
		"metadata.labels: redis-attacker may write only its own release's objects")
	refused(attacker.Delete(ctx, record), "secrets sh.helm.release.v1.redis-victim.v1 belongs to the app redis-victim")
	refused(attacker.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.redis-victim.v2", Namespace: deliveryNS,
		Labels: map[string]string{"owner": "helm", "name": "redis-attacker"}}}), "sh.helm.release.v1.redis-attacker.v<N>")
	refused(as("default").Create(ctx, labelled(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: tenantNS}}, "default")),
		"is no app's identity")
	// Its own objects it may write, and delete.
	mine := labelled(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "attacker-config", Namespace: tenantNS}}, "redis-attacker")
	g.Expect(attacker.Create(ctx, mine)).To(Succeed())
	g.Expect(attacker.Delete(ctx, mine)).To(Succeed())

	got := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(secret), got)).To(Succeed())
	g.Expect(string(got.Data["password"])).To(Equal("rotated"))
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
	g.Expect(claim.DeletionTimestamp).To(BeNil())
	g.Expect(claim.Labels).To(HaveKeyWithValue("helm.toolkit.fluxcd.io/name", "redis-victim"))
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
