package tenant_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The attack suite: each test acts as a hostile admin of tenant acme (group tenant-acme-admin)
// trying to cross a boundary the platform promises, and shows that the real kube-apiserver, with
// the real webhook and reconciler, refuses.

// acmeAndBeta builds root → acme (host acme.example.org by default) and its sibling beta, with
// the given quota for acme, and returns a client acting as acme's admin.
func acmeAndBeta(ctx context.Context, t *testing.T, g Gomega, cpu string) (*tenancyv1.Tenant, client.Client) {
	rootTenant(t)
	acme := MakeTenant("acme", "tenant-root").Quota("cpu", cpu).Quota("count/pods", "100").Obj()
	beta := MakeTenant("beta", "tenant-root").Quota("cpu", "2").Quota("count/pods", "10").Obj()
	createAll(ctx, g, acme, beta)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), acme, beta) })
	eventuallyCurrent(ctx, g, acme, beta)
	admin, err := env.As("mallory", "tenant-acme-admin")
	g.Expect(err).NotTo(HaveOccurred())
	return acme, admin
}

// platformAdmin returns a client for a user bound to the chart's flotilla:platform-admin role.
func platformAdmin(ctx context.Context, t *testing.T, g Gomega) client.Client {
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-platform-admins"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:platform-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "platform-admins"}}}
	if err := k8s.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
	c, err := env.As("pat", "platform-admins")
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// expectRefused asserts a 422 naming field.
func expectRefused(g Gomega, err error, field string) {
	g.ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "want 422 naming %s, got %v", field, err)
	g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(field + ":"))
}

func subject(kind, name, ns string) rbacv1.Subject {
	s := rbacv1.Subject{Kind: kind, Name: name, Namespace: ns}
	if kind != rbacv1.ServiceAccountKind {
		s.APIGroup = rbacv1.GroupName
	}
	return s
}

func withAccess(tn *tenancyv1.Tenant, role tenancyv1.TenantRole, subjects ...rbacv1.Subject) *tenancyv1.Tenant {
	tn.Spec.Access = append(tn.Spec.Access, tenancyv1.AccessBinding{Role: role, Subjects: subjects})
	return tn
}

// A tenant admin may grant, on a child, only what they could bind themselves, and may not claim
// another tenant's domain or loosen Pod Security.
func TestAttackChildTenantCrossesBoundaries(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	_, admin := acmeAndBeta(ctx, t, g, "10")
	pat := platformAdmin(ctx, t, g)
	// Each attempt is a child of its own name, so that one wrongly admitted does not hide the next.
	dev := func(name string) *tenancyv1.Tenant {
		return MakeTenant(name, "tenant-acme").Quota("cpu", "1").Quota("count/pods", "10").Obj()
	}

	t.Run("every user of the cluster made admin", func(t *testing.T) {
		err := admin.Create(ctx, withAccess(dev("everyone"), tenancyv1.RoleAdmin, subject(rbacv1.GroupKind, "system:authenticated", "")))
		expectRefused(NewWithT(t), err, "spec.access[0].subjects[0]")
	})
	t.Run("another tenant's ServiceAccount bound", func(t *testing.T) {
		err := admin.Create(ctx, withAccess(dev("foreignsa"), tenancyv1.RoleView, subject(rbacv1.ServiceAccountKind, "default", "tenant-beta")))
		expectRefused(NewWithT(t), err, "spec.access[0].subjects[0]")
	})
	t.Run("a role above the requester's granted", func(t *testing.T) {
		err := admin.Create(ctx, withAccess(dev("escalate"), tenancyv1.RoleSuperAdmin, subject(rbacv1.UserKind, "eve", "")))
		expectRefused(NewWithT(t), err, "spec.access[0].role")
	})
	t.Run("a sibling's domain claimed", func(t *testing.T) {
		err := admin.Create(ctx, MakeTenant("squat", "tenant-acme").Host("beta.example.org").Quota("cpu", "1").Quota("count/pods", "10").Obj())
		expectRefused(NewWithT(t), err, "spec.host")
	})
	t.Run("pod security loosened", func(t *testing.T) {
		tn := dev("privileged")
		tn.Spec.PodSecurity = &tenancyv1.PodSecurity{Enforce: tenancyv1.PodSecurityPrivileged}
		expectRefused(NewWithT(t), admin.Create(ctx, tn), "spec.podSecurity")
	})

	// What stays within acme is admitted: a role acme's admin holds, for a user and a
	// ServiceAccount of the child's own namespace, under acme's host.
	ok := withAccess(MakeTenant("dev", "tenant-acme").Host("shop.dev.acme.example.org").Quota("cpu", "1").Quota("count/pods", "10").Obj(),
		tenancyv1.RoleAdmin, subject(rbacv1.UserKind, "erin", ""), subject(rbacv1.ServiceAccountKind, "ci", "tenant-acme-dev"))
	g.Expect(admin.Create(ctx, ok)).To(Succeed())
	eventuallyCurrent(ctx, g, ok)
	// Editing it later, without touching what a platform admin set, stays possible.
	// A platform admin may set any host and the pod security level (eventually: kube-apiserver's
	// RBAC cache learns of the platform admin's binding by a watch).
	g.Eventually(func() error {
		return update(ctx, pat, ok, func(cur *tenancyv1.Tenant) {
			cur.Spec.Host = "beta.example.org"
			cur.Spec.PodSecurity = &tenancyv1.PodSecurity{Enforce: tenancyv1.PodSecurityRestricted}
		})
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		ns := &corev1.Namespace{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tenant-acme-dev"}, ns)).To(Succeed())
		g.Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(update(ctx, admin, ok, func(cur *tenancyv1.Tenant) {
		cur.Spec.ResourceQuotas[corev1.ResourceCPU] = resource.MustParse("2")
	})).To(Succeed())
	expectRefused(g, update(ctx, admin, ok, func(cur *tenancyv1.Tenant) { cur.Spec.Host = "dev.beta.example.org" }), "spec.host")
}

// update changes a tenant as c, retrying while the controller's status writes conflict.
func update(ctx context.Context, c client.Client, tn *tenancyv1.Tenant, change func(*tenancyv1.Tenant)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &tenancyv1.Tenant{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			return err
		}
		change(cur)
		return c.Update(ctx, cur)
	})
}

// Tenant namespaces enforce Pod Security baseline: acme's admin cannot run a pod that owns the
// node, while an ordinary pod runs.
func TestAttackPrivilegedPodIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	_, admin := acmeAndBeta(ctx, t, g, "10")

	privileged := pod("root-of-node", "tenant-acme", "100m")
	privileged.Spec.HostPID, privileged.Spec.HostNetwork = true, true
	privileged.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	privileged.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	privileged.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
	err := admin.Create(ctx, privileged)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`violates PodSecurity "baseline:latest"`))

	// An ordinary pod is admitted (once kube-controller-manager has counted the namespace's quota).
	g.Eventually(func() error {
		return admin.Create(ctx, pod("ordinary", "tenant-acme", "100m"))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Nor can the admin lift the level through the namespace.
	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tenant-acme"}, ns)).To(Succeed())
	ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	g.Expect(apierrors.IsForbidden(admin.Update(ctx, ns))).To(BeTrue())
}

// acme's admin cannot use more than acme's quota: the real quota admission refuses the pod.
func TestAttackPodOverQuotaIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	_, admin := acmeAndBeta(ctx, t, g, "2")

	// Once kube-controller-manager has counted the namespace's usage, a pod within the quota is
	// admitted …
	g.Eventually(func() error {
		return admin.Create(ctx, pod("small", "tenant-acme", "500m"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// … and one beyond it is refused.
	err := admin.Create(ctx, pod("big", "tenant-acme", "2"))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("exceeded quota: flotilla-tenant"))
}

func pod(name, ns, cpu string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Image: "registry.example.org/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
	}}
}

// A child being deleted keeps its namespace, and what runs there, until its teardown ends: its
// share still counts, so a sibling that would fit only without it is refused.
func TestAttackDeletingChildStillCounts(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	_, admin := acmeAndBeta(ctx, t, g, "4")
	old := MakeTenant("old", "tenant-acme").Quota("cpu", "3").Quota("count/pods", "10").Obj()
	g.Expect(admin.Create(ctx, old)).To(Succeed())
	eventuallyCurrent(ctx, g, old)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "tenant-acme-old", Finalizers: []string{hold}}}
	g.Expect(k8s.Create(ctx, cm)).To(Succeed())
	t.Cleanup(func() { release(ctxFor(t), NewWithT(t), cm) })
	g.Expect(admin.Delete(ctx, old)).To(Succeed())
	// The controller has seen the deletion (and so has the webhook, which reads the same cache).
	g.Eventually(func(g Gomega) {
		g.Expect(condition(get(ctx, g, old), tenancyv1.NamespaceReadyCondition).Message).To(ContainSubstring(hold))
	}).WithTimeout(60 * time.Second).Should(Succeed())

	err := admin.Create(ctx, MakeTenant("new", "tenant-acme").Quota("cpu", "2").Quota("count/pods", "10").Obj())
	expectRefused(g, err, "spec.resourceQuotas[cpu]")
	g.Expect(err.Error()).To(ContainSubstring("1 is available"))
}

// Twenty children created at once against a parent with room for eight: however the webhook's
// cache races, exactly the eight earliest (creation time, then name) get their quota, and the rest
// say why and get nothing: no namespace, no ResourceQuota, no role binding.
func TestAttackConcurrentChildrenCannotOversubscribe(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // three rounds of twenty tenants
	t.Cleanup(cancel)
	_, admin := acmeAndBeta(ctx, t, g, "8")
	const rounds, children, room = 3, 20, 8
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, children)
		for i := range children {
			wg.Go(func() {
				// acme's namespace counts its Tenants (the default object counts): concurrent
				// creates race on its ResourceQuota's usage, and the loser gets a Conflict, which
				// a client retries, as kubectl's users and controllers do.
				errs[i] = retry.OnError(retry.DefaultBackoff, apierrors.IsConflict, func() error {
					return admin.Create(ctx, MakeTenant(fmt.Sprintf("r%dc%02d", round, i), "tenant-acme").
						Quota("cpu", "1").Quota("count/pods", "1").Obj())
				})
			})
		}
		wg.Wait()
		admitted := 0
		for _, err := range errs {
			if err == nil {
				admitted++
				continue
			}
			expectRefused(g, err, "spec.resourceQuotas[cpu]")
		}
		t.Logf("round %d: the webhook admitted %d of %d children", round, admitted, children)

		g.Eventually(func(g Gomega) {
			list := &tenancyv1.TenantList{}
			g.Expect(k8s.List(ctx, list, client.InNamespace("tenant-acme"))).To(Succeed())
			kids := list.Items
			g.Expect(kids).To(HaveLen(admitted))
			sort.Slice(kids, func(i, j int) bool {
				a, b := kids[i].CreationTimestamp, kids[j].CreationTimestamp
				if !a.Equal(&b) {
					return a.Before(&b)
				}
				return kids[i].Name < kids[j].Name
			})
			for i := range kids {
				kid := &kids[i]
				ns := "tenant-acme-" + kid.Name
				quotas := &corev1.ResourceQuotaList{}
				g.Expect(k8s.List(ctx, quotas, client.InNamespace(ns))).To(Succeed())
				c := condition(kid, tenancyv1.QuotaReadyCondition)
				if i < room {
					g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s (#%d): %+v", kid.Name, i, c)
					g.Expect(quotas.Items).To(HaveLen(1), kid.Name)
					g.Expect(quotas.Items[0].Spec.Hard.Cpu().Cmp(resource.MustParse("1"))).To(Equal(0), kid.Name)
					continue
				}
				g.Expect(c.Reason).To(Equal(tenancyv1.ParentQuotaExceededReason), "%s (#%d): %+v", kid.Name, i, c)
				g.Expect(c.Message).To(ContainSubstring("acme caps it at 8, earlier siblings hold 8"))
				g.Expect(condition(kid, "Stalled").Status).To(Equal(metav1.ConditionTrue), kid.Name)
				g.Expect(quotas.Items).To(BeEmpty(), kid.Name)
				bindings := &rbacv1.RoleBindingList{}
				g.Expect(k8s.List(ctx, bindings, client.InNamespace(ns))).To(Succeed())
				g.Expect(bindings.Items).To(BeEmpty(), kid.Name)
				g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))).To(BeTrue(), ns)
			}
		}).WithTimeout(90 * time.Second).Should(Succeed())

		list := &tenancyv1.TenantList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace("tenant-acme"))).To(Succeed())
		kids := make([]*tenancyv1.Tenant, len(list.Items))
		for i := range list.Items {
			kids[i] = &list.Items[i]
		}
		deleteTree(ctx, g, kids...)
	}
}

// A tenant's Ingresses and Services claim only what is its own: host names under its host, no
// external address of the cluster's network, no port on every node. The platform may.
func TestTenantClaimsOnlyItsOwnHostsAndAddresses(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	_, acme := acmeAndBeta(ctx, t, g, "2")
	ingress := func(name string, hosts ...string) *networkingv1.Ingress {
		in := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-acme"}}
		backend := &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}
		for _, h := range hosts {
			in.Spec.Rules = append(in.Spec.Rules, networkingv1.IngressRule{Host: h, IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix), Backend: *backend}}}}})
		}
		return in
	}
	service := func(name string, mutate func(*corev1.ServiceSpec)) *corev1.Service {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-acme"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		mutate(&svc.Spec)
		return svc
	}
	refused := func(err error, says ...string) {
		g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue(), "want 403, got %v", err)
		for _, s := range append(says, "flotilla-tenant-claims") {
			g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(s))
		}
	}

	// kube-apiserver loads a new policy a moment after it is created.
	g.Eventually(func() error {
		return acme.Create(ctx, ingress("beta-shop", "shop.beta.example.org"))
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("flotilla-tenant-claims")))
	refused(acme.Create(ctx, ingress("beta-shop", "shop.beta.example.org")), "spec.rules[].host: shop.beta.example.org", "acme.example.org")
	refused(acme.Create(ctx, ingress("apex", "example.org")), "example.org is not acme.example.org")
	refused(acme.Create(ctx, ingress("wild", "*.example.org")), "*.example.org")
	refused(acme.Create(ctx, ingress("lookalike", "evilacme.example.org")), "evilacme.example.org")
	refused(acme.Create(ctx, ingress("catch-all", "")), "spec.rules[].host: required")
	tls := ingress("tls", "shop.acme.example.org")
	tls.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"shop.acme.example.org", "login.beta.example.org"}, SecretName: "tls"}}
	refused(acme.Create(ctx, tls), "login.beta.example.org")
	mine := ingress("shop", "shop.acme.example.org", "acme.example.org", "*.acme.example.org")
	g.Expect(acme.Create(ctx, mine)).To(Succeed())
	mine.Spec.Rules[0].Host = "shop.beta.example.org"
	refused(acme.Update(ctx, mine), "shop.beta.example.org")

	refused(acme.Create(ctx, service("external", func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"192.0.2.10"} })), "spec.externalIPs")
	refused(acme.Create(ctx, service("node-port", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort })), "spec.type: NodePort")
	refused(acme.Create(ctx, service("lb-port", func(s *corev1.ServiceSpec) {
		s.Type = corev1.ServiceTypeLoadBalancer
		s.Ports[0].NodePort = 30080
	})), "spec.ports[].nodePort")
	// A LoadBalancer Service gets its address from the pool and no node port, and stays
	// writable.
	lb := service("lb", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeLoadBalancer })
	g.Expect(acme.Create(ctx, lb)).To(Succeed())
	g.Expect(lb.Spec.AllocateLoadBalancerNodePorts).To(Equal(ptr.To(false)))
	g.Expect(lb.Spec.Ports[0].NodePort).To(BeZero())
	lb.Labels = map[string]string{"tier": "web"}
	g.Expect(acme.Update(ctx, lb)).To(Succeed())
	lb.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
	g.Expect(acme.Update(ctx, lb)).To(Succeed())
	g.Expect(lb.Spec.AllocateLoadBalancerNodePorts).To(Equal(ptr.To(false)))

	// The platform's identities may (a tenant cluster's control plane, say).
	g.Expect(k8s.Create(ctx, service("platform", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }))).To(Succeed())
	g.Expect(k8s.Create(ctx, ingress("platform", "console.example.org"))).To(Succeed())
}
