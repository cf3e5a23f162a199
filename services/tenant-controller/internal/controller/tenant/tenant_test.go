package tenant_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The tests share one root tenant; each builds its own subtree under it and removes it.
func rootTenant(t *testing.T) *tenancyv1.Tenant {
	g := NewWithT(t)
	ctx := ctxFor(t)
	root := MakeTenant("root", tenancyv1.RootNamespace).Host("example.org").Services(true, true, true).
		Quota("cpu", "100").Quota("count/pods", "1000").Obj()
	if err := k8s.Create(ctx, root); err != nil && !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
	eventuallyCurrent(ctx, g, root)
	return root
}

func TestTreeIsCreatedWithLabelsAndInheritance(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	acme := MakeTenant("acme", "tenant-root").Quota("cpu", "10").Quota("count/pods", "100").Obj()
	dev := MakeTenant("dev", "tenant-acme").Quota("cpu", "4").Quota("count/pods", "10").Services(false, false, true).SchedulingClass("gold").Obj()
	createAll(ctx, g, acme, dev)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), acme) })
	eventuallyCurrent(ctx, g, acme, dev)

	got := get(ctx, g, dev)
	g.Expect(got.Status.Namespace).To(Equal("tenant-acme-dev"))
	g.Expect(got.Status.Path).To(Equal("root.acme.dev"))
	g.Expect(got.Status.Depth).To(BeEquivalentTo(2))
	g.Expect(got.Status.Host).To(Equal("dev.acme.example.org"))
	g.Expect(got.Status.SchedulingClass).To(Equal("gold"))
	g.Expect(got.Status.Services).To(Equal(tenancyv1.SharedServices{
		Ingress: "tenant-root", Monitoring: "tenant-root", Etcd: "tenant-acme-dev"}))
	g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))

	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-acme-dev"}, ns)).To(Succeed())
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelTenant, "dev"))
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelParent, "tenant-acme"))
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelDepth, "2"))
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelPath, "root.acme.dev"))
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelIngress, "tenant-root"))
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelEtcd, "tenant-acme-dev"))
	g.Expect(ns.Labels).To(HaveKeyWithValue(tenancyv1.LabelSchedulingClass, "gold"))
	g.Expect(ns.Annotations).To(HaveKeyWithValue(tenancyv1.AnnotationHost, "dev.acme.example.org"))

	// acme's own namespace keeps what its children did not reserve.
	rq := &corev1.ResourceQuota{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-acme", Name: "flotilla-tenant"}, rq)).To(Succeed())
	g.Expect(rq.Spec.Hard.Cpu().Cmp(resource.MustParse("6"))).To(Equal(0), "hard cpu %s", rq.Spec.Hard.Cpu())

	rb := &rbacv1.RoleBinding{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-acme-dev", Name: "flotilla-tenant-admin"}, rb)).To(Succeed())
	var groups []string
	for _, s := range rb.Subjects {
		groups = append(groups, s.Name)
	}
	g.Expect(groups).To(Equal([]string{"tenant-root-admin", "tenant-acme-admin", "tenant-acme-dev-admin"}))

	// A child may not pick a scheduling class below an ancestor that set one.
	bad := MakeTenant("qa", "tenant-acme-dev").Quota("cpu", "1").Quota("count/pods", "1").SchedulingClass("silver").Obj()
	err := k8s.Create(ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.schedulingClass"))
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	quiet := MakeTenant("quiet", "tenant-root").Quota("cpu", "1").Quota("count/pods", "1").Obj()
	createAll(ctx, g, quiet)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), quiet) })
	eventuallyCurrent(ctx, g, quiet)

	// Everything the controller owns keeps its resourceVersion once converged, even across a
	// restart of the controller (which reconciles every tenant again).
	snapshot := func() map[string]string {
		out := map[string]string{}
		lists := []client.ObjectList{&tenancyv1.TenantList{}, &corev1.ResourceQuotaList{}, &rbacv1.RoleBindingList{}, &networkingv1.NetworkPolicyList{}}
		for _, l := range lists {
			g.Expect(k8s.List(ctx, l, client.InNamespace("tenant-quiet"))).To(Succeed())
		}
		for _, o := range lists[1].(*corev1.ResourceQuotaList).Items {
			out["rq/"+o.Name] = o.ResourceVersion
		}
		for _, o := range lists[2].(*rbacv1.RoleBindingList).Items {
			out["rb/"+o.Name] = o.ResourceVersion
		}
		for _, o := range lists[3].(*networkingv1.NetworkPolicyList).Items {
			out["np/"+o.Name] = o.ResourceVersion
		}
		ns := &corev1.Namespace{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-quiet"}, ns)).To(Succeed())
		out["ns"] = ns.ResourceVersion
		out["tenant"] = get(ctx, g, quiet).ResourceVersion
		return out
	}
	before := snapshot()
	stopManager()
	g.Expect(startManager()).To(Succeed())
	time.Sleep(3 * time.Second) // give the restarted controller time to reconcile everything
	g.Expect(snapshot()).To(Equal(before))
}

func TestQuotaAdmissionAtDepthThree(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	q := MakeTenant("q", "tenant-root").Quota("cpu", "8").Quota("count/pods", "50").Obj()
	q1 := MakeTenant("one", "tenant-q").Quota("cpu", "4").Quota("count/pods", "20").Obj()
	createAll(ctx, g, q, q1)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), q) })
	eventuallyCurrent(ctx, g, q, q1)

	// Depth 3: children of tenant-q-one share its cpu=4.
	a := MakeTenant("a", "tenant-q-one").Quota("cpu", "3").Quota("count/pods", "5").Obj()
	g.Expect(k8s.Create(ctx, a)).To(Succeed())
	eventuallyCurrent(ctx, g, a)

	tooMuch := MakeTenant("b", "tenant-q-one").Quota("cpu", "2").Quota("count/pods", "5").Obj()
	err := k8s.Create(ctx, tooMuch)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.resourceQuotas[cpu]"))
	g.Expect(err.Error()).To(ContainSubstring("one caps it at 4"))
	g.Expect(err.Error()).To(ContainSubstring("1 is available"))

	undeclared := MakeTenant("c", "tenant-q-one").Quota("cpu", "1").Obj()
	err = k8s.Create(ctx, undeclared)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.resourceQuotas[count/pods]: Required value"))

	fits := MakeTenant("b", "tenant-q-one").Quota("cpu", "1").Quota("count/pods", "5").Obj()
	g.Expect(k8s.Create(ctx, fits)).To(Succeed())
	eventuallyCurrent(ctx, g, fits)

	// Growing a child past its parent is refused too.
	grown := get(ctx, g, fits)
	grown.Spec.ResourceQuotas[corev1.ResourceCPU] = resource.MustParse("2")
	err = k8s.Update(ctx, grown)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)

	// Lowering the parent is allowed (with a warning). Quota goes first come, first served: the
	// earlier child keeps its share, the later one says it no longer fits, and its namespace's
	// quota drops to zero.
	one := get(ctx, g, q1)
	one.Spec.ResourceQuotas[corev1.ResourceCPU] = resource.MustParse("3")
	g.Expect(k8s.Update(ctx, one)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := get(ctx, g, fits)
		c := condition(got, tenancyv1.QuotaReadyCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(tenancyv1.ParentQuotaExceededReason))
		g.Expect(c.Message).To(ContainSubstring("caps it at 3, earlier siblings hold 3 (a), 0 is available"))
		g.Expect(condition(got, "Stalled").Status).To(Equal(metav1.ConditionTrue))
		rq := &corev1.ResourceQuota{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-q-one-b", Name: "flotilla-tenant"}, rq)).To(Succeed())
		g.Expect(rq.Spec.Hard.Cpu().IsZero()).To(BeTrue(), "hard cpu %s", rq.Spec.Hard.Cpu())
		g.Expect(condition(get(ctx, g, a), tenancyv1.QuotaReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Raising it again heals them.
	one = get(ctx, g, q1)
	one.Spec.ResourceQuotas[corev1.ResourceCPU] = resource.MustParse("4")
	g.Expect(k8s.Update(ctx, one)).To(Succeed())
	eventuallyCurrent(ctx, g, a, fits)
}

func TestValidationAtTheAPI(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	// A tenant-looking namespace with no tenant behind it.
	g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-missing"}})).To(Succeed())
	for _, tc := range []struct {
		tenant *tenancyv1.Tenant
		want   string
	}{
		{MakeTenant("Bad-Name", "tenant-root").Obj(), "metadata.name must match ^[a-z][a-z0-9]*$"},
		{MakeTenant("x", "default").Obj(), "metadata.namespace"},
		{MakeTenant("nope", "tenant-missing").Obj(), "parent tenant tenant-root/missing does not exist"},
		{MakeTenant("a23456789012345678901234567890123456789012345678901234567", "tenant-root").Obj(), "at most 56 characters"},
		{MakeTenant("neg", "tenant-root").Quota("cpu", "-1").Quota("count/pods", "1").Obj(), "must not be negative"},
		// Nine bytes that parse at once, and would take the quota arithmetic minutes and gigabytes.
		{MakeTenant("huge", "tenant-root").Quota("cpu", "1e1000000000").Quota("count/pods", "1").Obj(), "(the largest int64)"},
		{MakeTenant("host", "tenant-root").Host("Not_A_Host").Quota("cpu", "1").Quota("count/pods", "1").Obj(), "spec.host"},
	} {
		err := k8s.Create(ctx, tc.tenant)
		g.Expect(err).To(HaveOccurred(), tc.tenant.Name)
		g.Expect(err.Error()).To(ContainSubstring(tc.want), tc.tenant.Name)
	}
}
