package tenantaddresspool_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/loadbalancerpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantaddresspool"
	ts "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// PoolBuilder builds LoadBalancerPools: MakePool("a", "case").IPv4(29, "198.51.100.0/24").Obj().
type PoolBuilder struct{ p netv1.LoadBalancerPool }

// MakePool starts a pool selecting the namespaces of one test case.
func MakePool(name, testCase string) *PoolBuilder {
	return &PoolBuilder{p: netv1.LoadBalancerPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: netv1.LoadBalancerPoolSpec{NamespaceSelector: ts.CaseSelector(testCase)}}}
}

func (b *PoolBuilder) IPv4(bits int32, cidrs ...string) *PoolBuilder {
	b.p.Spec.IPv4 = &netv1.BlockRange{CIDRs: cidrs, BlockPrefixLength: bits}
	return b
}

func (b *PoolBuilder) IPv6(bits int32, cidrs ...string) *PoolBuilder {
	b.p.Spec.IPv6 = &netv1.BlockRange{CIDRs: cidrs, BlockPrefixLength: bits}
	return b
}

func (b *PoolBuilder) Interfaces(names ...string) *PoolBuilder {
	b.p.Spec.Interfaces = names
	return b
}

func (b *PoolBuilder) Obj() *netv1.LoadBalancerPool { return b.p.DeepCopy() }

func create(ctx context.Context, t *testing.T, objs ...client.Object) {
	t.Helper()
	ts.Create(ctx, t, k8s, objs...)
}

// readyPool waits until the namespace's TenantAddressPool is Ready.
func readyPool(ctx context.Context, g Gomega, name string) *netv1.TenantAddressPool {
	return ts.Ready[netv1.TenantAddressPool](ctx, g, k8s, types.NamespacedName{Name: name})
}

// getMetalLB reads a MetalLB object in MetalLB's namespace.
func getMetalLB(ctx context.Context, gvk metav1.GroupVersionKind, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gvk.Group + "/" + gvk.Version)
	u.SetKind(gvk.Kind)
	return u, k8s.Get(ctx, types.NamespacedName{Namespace: metallbNS, Name: name}, u)
}

var (
	ipAddressPool   = metav1.GroupVersionKind(metallb.IPAddressPoolGVK)
	l2Advertisement = metav1.GroupVersionKind(metallb.L2AdvertisementGVK)
)

// ownPools lists the IPAddressPools the controller holds for a namespace.
func ownPools(ctx context.Context, g Gomega, ns string) []metav1.PartialObjectMetadata {
	list := metallb.ListMeta(metallb.IPAddressPoolGVK)
	g.Expect(k8s.List(ctx, list, client.InNamespace(metallbNS), client.MatchingLabels{netv1.LabelNamespace: ns})).To(Succeed())
	return list.Items
}

func loadBalancer(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
}

func TestTenantsGetDisjointBlocksOnlyTheirServicesMayUse(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	create(ctx, t, MakePool("pub", "pub").IPv4(29, "198.51.100.0/26").IPv6(120, "fd00:5100::/112").Interfaces("eth1").Obj())
	names := []string{"tenant-pub-a", "tenant-pub-b", "tenant-pub-c"}
	for _, n := range names {
		create(ctx, t, ts.TenantNamespace(n, "pub"))
	}
	seen := map[string]string{}
	for _, n := range names {
		tp := readyPool(ctx, g, n)
		g.Expect(tp.Status.Pool).To(Equal("pub"))
		v4 := netip.MustParsePrefix(tp.Status.IPv4)
		g.Expect(v4.Bits()).To(Equal(29))
		g.Expect(netip.MustParsePrefix("198.51.100.0/26").Overlaps(v4)).To(BeTrue(), tp.Status.IPv4)
		g.Expect(seen).NotTo(HaveKey(tp.Status.IPv4), "%s and %s hold one block", n, seen[tp.Status.IPv4])
		seen[tp.Status.IPv4] = n
		g.Expect(conditions.Get(tp, netv1.AddressPoolReadyCondition).Message).To(ContainSubstring("8 IPv4, 256 IPv6 addresses; no ResourceQuota caps services.loadbalancers"))

		// The IPAddressPool, as MetalLB's schema has it: the block, only for this namespace.
		name := strings.TrimPrefix(tp.Status.AddressPool, metallbNS+"/")
		pool, err := getMetalLB(ctx, ipAddressPool, name)
		g.Expect(err).NotTo(HaveOccurred())
		addrs, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses")
		g.Expect(addrs).To(Equal([]string{tp.Status.IPv4, tp.Status.IPv6}))
		nss, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "serviceAllocation", "namespaces")
		g.Expect(nss).To(Equal([]string{n}))
		auto, _, _ := unstructured.NestedBool(pool.Object, "spec", "autoAssign")
		g.Expect(auto).To(BeTrue())
		g.Expect(pool.GetLabels()).To(HaveKeyWithValue(netv1.LabelPool, "pub"))
	}

	adv, err := getMetalLB(ctx, l2Advertisement, "pub")
	g.Expect(err).NotTo(HaveOccurred())
	ifs, _, _ := unstructured.NestedStringSlice(adv.Object, "spec", "interfaces")
	g.Expect(ifs).To(Equal([]string{"eth1"}))
	sels, _, _ := unstructured.NestedSlice(adv.Object, "spec", "ipAddressPoolSelectors")
	g.Expect(sels).To(HaveLen(1))
	g.Expect(sels[0]).To(HaveKeyWithValue("matchLabels", HaveKeyWithValue(netv1.LabelPool, "pub")))

	lbp := &netv1.LoadBalancerPool{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "pub"}, lbp)).To(Succeed())
		g.Expect(conditions.IsReady(lbp)).To(BeTrue(), "%v", lbp.Status.Conditions)
		g.Expect(lbp.Status.Allocated).To(BeEquivalentTo(3))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	g.Expect(lbp.Status.Blocks).To(BeEquivalentTo(8), "a /26 cut into /29s, paired with 256 /120s")

	// Dropping the interfaces announces on every interface again.
	before := lbp.DeepCopy()
	lbp.Spec.Interfaces = nil
	g.Expect(k8s.Patch(ctx, lbp, client.MergeFrom(before))).To(Succeed())
	g.Eventually(func(g Gomega) {
		adv, err := getMetalLB(ctx, l2Advertisement, "pub")
		g.Expect(err).NotTo(HaveOccurred())
		ifs, _, _ := unstructured.NestedStringSlice(adv.Object, "spec", "interfaces")
		g.Expect(ifs).To(BeEmpty())
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
}

// The number of LoadBalancer Services is the tenant's quota, services.loadbalancers, enforced by
// kube-apiserver: a tenant admin creating one too many is refused. Nor can the admin give itself
// addresses through MetalLB's kinds or the platform's.
func TestATenantAdminCannotExceedItsLoadBalancerQuota(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	ns := "tenant-quota"
	for _, f := range []string{ts.ChartDir("tenant-controller", "templates", "tenant-roles.yaml"),
		ts.ChartDir("net-controller", "templates", "tenant-roles.yaml")} {
		g.Expect(testenv.ApplyFile(ctx, k8s, filepath.Clean(f))).To(Succeed())
	}
	// The ResourceQuota as the tenant-controller writes it from Tenant.spec.resourceQuotas.
	create(ctx, t, MakePool("quota", "quota").IPv4(29, "198.51.100.64/27").Obj(), ts.TenantNamespace(ns, "quota"),
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-tenant", Namespace: ns},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServicesLoadBalancers: resource.MustParse("2")}}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "flotilla-tenant-admin", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:tenant:admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant-quota-admin"}},
		})
	tp := readyPool(ctx, g, ns)
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ns}, tp)).To(Succeed())
		g.Expect(tp.Status.Quota).To(Equal("2"))
		g.Expect(conditions.Get(tp, netv1.AddressPoolReadyCondition).Message).To(ContainSubstring("with 8 addresses; its quota allows 2 LoadBalancer Services"))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())

	admin, err := env.As("tenant-quota-admin")
	g.Expect(err).NotTo(HaveOccurred())
	// The role aggregation and the quota's first count take a moment.
	g.Eventually(func() error { return admin.Create(ctx, loadBalancer(ns, "web-1")) }).
		WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	g.Expect(admin.Create(ctx, loadBalancer(ns, "web-2"))).To(Succeed())
	err = admin.Create(ctx, loadBalancer(ns, "web-3"))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a third LoadBalancer Service: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("exceeded quota: flotilla-tenant"))
	g.Expect(err.Error()).To(ContainSubstring("services.loadbalancers"))
	// A ClusterIP Service is not a load balancer: the quota does not count it.
	clusterIP := loadBalancer(ns, "internal")
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	g.Expect(admin.Create(ctx, clusterIP)).To(Succeed())

	// MetalLB's kinds and the platform's are not the tenant's to write.
	own := metallb.AddressPool(blocks.Allocation{Pool: "mine", Namespace: ns, IPv4: "203.0.113.0/24"}, ns)
	g.Expect(apierrors.IsForbidden(admin.Create(ctx, own))).To(BeTrue(), "a tenant admin creating an IPAddressPool in its namespace")
	other := metallb.AddressPool(blocks.Allocation{Pool: "mine", Namespace: ns, IPv4: "203.0.113.0/24"}, metallbNS)
	g.Expect(apierrors.IsForbidden(admin.Create(ctx, other))).To(BeTrue(), "a tenant admin creating an IPAddressPool in MetalLB's namespace")
	g.Expect(apierrors.IsForbidden(admin.Create(ctx, MakePool("mine", "quota").IPv4(24, "203.0.113.0/24").Obj()))).To(BeTrue(),
		"a tenant admin creating a LoadBalancerPool")
	cur := &netv1.TenantAddressPool{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ns}, cur)).To(Succeed())
	cur.Status.IPv4 = "203.0.113.0/24"
	g.Expect(apierrors.IsForbidden(admin.Status().Update(ctx, cur))).To(BeTrue(), "a tenant admin writing its TenantAddressPool")
}

func TestPoolExhaustedSaysSoThenServesABlockOnceNoServiceHoldsIt(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	create(ctx, t, MakePool("small", "small").IPv4(30, "198.51.100.96/29").Obj())
	names := []string{"tenant-small-a", "tenant-small-b", "tenant-small-c"}
	for _, n := range names {
		create(ctx, t, ts.TenantNamespace(n, "small"))
	}
	var waiting string
	g.Eventually(func(g Gomega) {
		ready := 0
		waiting = ""
		for _, n := range names {
			tp := &netv1.TenantAddressPool{}
			g.Expect(k8s.Get(ctx, types.NamespacedName{Name: n}, tp)).To(Succeed())
			if conditions.IsReady(tp) {
				ready++
				continue
			}
			c := conditions.Get(tp, netv1.AllocatedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(netv1.PoolExhaustedReason))
			g.Expect(c.Message).To(ContainSubstring("LoadBalancerPool small is exhausted: 2 of 2 blocks are held (4 addresses each)"))
			g.Expect(conditions.IsTrue(tp, "Stalled")).To(BeTrue())
			waiting = n
		}
		g.Expect(ready).To(Equal(2))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())

	leaving := names[0]
	if leaving == waiting {
		leaving = names[1]
	}
	held := readyPool(ctx, g, leaving)
	// A Service of the namespace holds an address of the block (MetalLB gives it one).
	svc := loadBalancer(leaving, "web")
	create(ctx, t, svc)
	g.Expect(netip.MustParsePrefix(held.Status.IPv4).Contains(assigned(ctx, g, leaving, "web"))).To(BeTrue())

	ts.DropTenantLabel(ctx, t, k8s, leaving)
	g.Eventually(func(g Gomega) {
		tp := &netv1.TenantAddressPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: leaving}, tp)).To(Succeed())
		c := conditions.Get(tp, netv1.AddressPoolReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(netv1.AddressPoolInUseReason))
		g.Expect(c.Message).To(ContainSubstring("holds 1 addresses"))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	g.Expect(ownPools(ctx, g, leaving)).To(HaveLen(1), "a pool a Service holds an address of was released")

	g.Expect(k8s.Delete(ctx, svc)).To(Succeed())
	g.Expect(readyPool(ctx, g, waiting).Status.IPv4).To(Equal(held.Status.IPv4))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: leaving}, &netv1.TenantAddressPool{}))
	}).WithTimeout(ts.Timeout).Should(BeTrue())
}

func TestMetalLBObjectsNotMadeByTheControllerAreLeftAlone(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	pool := MakePool("squat", "squat").IPv4(30, "198.51.100.128/28").Obj()
	// Someone else's IPAddressPool has the name of the block the namespace would be given first,
	first, _ := blocks.Pick("tenant-squat", blocks.Blocks(pool), nil)
	foreign := metallb.AddressPool(blocks.Allocation{Pool: "x", Namespace: "elsewhere", IPv4: "192.0.2.0/24"}, metallbNS)
	foreign.SetName(blocks.SubnetName("squat", first))
	foreign.SetLabels(map[string]string{"owner": "someone"})
	// and someone else's L2Advertisement the name of another pool.
	foreignAdv := metallb.L2Advertisement(&netv1.LoadBalancerPool{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metallbNS)
	foreignAdv.SetName("squat-adv")
	foreignAdv.SetLabels(nil)
	create(ctx, t, foreign, foreignAdv, pool, MakePool("squat-adv", "squat-adv").IPv4(30, "198.51.100.144/28").Obj(),
		ts.TenantNamespace("tenant-squat", "squat"))

	tp := readyPool(ctx, g, "tenant-squat")
	g.Expect(tp.Status.AddressPool).NotTo(HaveSuffix("/" + foreign.GetName()))
	g.Eventually(func(g Gomega) {
		cur := &netv1.LoadBalancerPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "squat-adv"}, cur)).To(Succeed())
		g.Expect(conditions.IsTrue(cur, "Stalled")).To(BeTrue())
		g.Expect(conditions.Get(cur, netv1.AdvertisedCondition).Reason).To(Equal(netv1.NotOwnedReason))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	for _, o := range []*unstructured.Unstructured{foreign, foreignAdv} {
		// MetalLB writes its pools' status; the net-controller writes nothing of them.
		after, err := getMetalLB(ctx, metav1.GroupVersionKind(o.GroupVersionKind()), o.GetName())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(managers(after)).NotTo(ContainElement(blocks.FieldOwner), "%s %s was written to", o.GetKind(), o.GetName())
		g.Expect(after.GetLabels()).To(Equal(o.GetLabels()))
		g.Expect(after.Object["spec"]).To(Equal(o.Object["spec"]))
	}
	// Deleting the pool whose name someone else's L2Advertisement has leaves that one in place.
	g.Expect(k8s.Delete(ctx, &netv1.LoadBalancerPool{ObjectMeta: metav1.ObjectMeta{Name: "squat-adv"}})).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "squat-adv"}, &netv1.LoadBalancerPool{}))
	}).WithTimeout(ts.Timeout).Should(BeTrue())
	_, err := getMetalLB(ctx, l2Advertisement, "squat-adv")
	g.Expect(err).NotTo(HaveOccurred())
}

func TestTwoAllocatorsNeverShareABlock(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	stop, err := startManager() // a second replica, with a cache of its own, beside the suite's
	g.Expect(err).NotTo(HaveOccurred())
	defer stop()
	create(ctx, t, MakePool("race", "race").IPv4(30, "198.51.101.0/26").Obj())
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("tenant-lbrace-%d", i))
		create(ctx, t, ts.TenantNamespace(names[i], "race"))
	}
	seen := map[string]string{}
	for _, n := range names {
		tp := readyPool(ctx, g, n)
		g.Expect(seen).NotTo(HaveKey(tp.Status.IPv4), "%s and %s hold one block", n, seen[tp.Status.IPv4])
		seen[tp.Status.IPv4] = n
		g.Eventually(func(g Gomega) { g.Expect(ownPools(ctx, g, n)).To(HaveLen(1)) }).WithTimeout(ts.Timeout).Should(Succeed())
	}
}

func TestAConvergedTenantCausesNoWriteAndSurvivesARestart(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	create(ctx, t, MakePool("calm", "calm").IPv4(32, "198.51.101.64/28").Interfaces("eth2").Obj(), ts.TenantNamespace("tenant-lbcalm", "calm"))
	tp := readyPool(ctx, g, "tenant-lbcalm")
	g.Expect(tp.Status.IPv4).To(HavePrefix("198.51.101."))
	name := strings.TrimPrefix(tp.Status.AddressPool, metallbNS+"/")
	pool, err := getMetalLB(ctx, ipAddressPool, name)
	g.Expect(err).NotTo(HaveOccurred())
	lbp := &netv1.LoadBalancerPool{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "calm"}, lbp)).To(Succeed())
		g.Expect(conditions.IsReady(lbp)).To(BeTrue())
		g.Expect(lbp.Status.Allocated).To(BeEquivalentTo(1))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	adv, err := getMetalLB(ctx, l2Advertisement, "calm")
	g.Expect(err).NotTo(HaveOccurred())
	// The baseline is taken once the pool, too, is Ready: the running controller may still have
	// been writing the namespace's report when it first read Ready.
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-lbcalm"}, tp)).To(Succeed())

	// Reconcilers that remember nothing, reading straight from kube-apiserver: what a restarted
	// controller does first. They find the allocation and write nothing.
	writes := &ts.WriteCounter{}
	c := writes.Wrap(k8s)
	fresh := &tenantaddresspool.Reconciler{Client: c, APIReader: k8s, Namespace: metallbNS}
	freshPool := &loadbalancerpool.Reconciler{Client: c, APIReader: c, Namespace: metallbNS}
	for range 2 {
		_, err := fresh.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-lbcalm"}})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = freshPool.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "calm"}})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes.Calls()).To(BeEmpty(), "requests that write, at steady state")
	for _, o := range []*unstructured.Unstructured{pool, adv} {
		// MetalLB writes its pools' status; the net-controller's own fields are as they were.
		after, err := getMetalLB(ctx, metav1.GroupVersionKind(o.GroupVersionKind()), o.GetName())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(owned(after)).To(Equal(owned(o)), "%s written at steady state", o.GetKind())
	}
	tp2 := &netv1.TenantAddressPool{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-lbcalm"}, tp2)).To(Succeed())
	g.Expect(tp2.ResourceVersion).To(Equal(tp.ResourceVersion))

	// Someone changes the pool's addresses: the controller puts its block back.
	// (A merge patch: MetalLB writes the pool's status meanwhile.)
	g.Expect(k8s.Patch(ctx, pool, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"addresses":["192.0.2.0/24"]}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur, err := getMetalLB(ctx, ipAddressPool, name)
		g.Expect(err).NotTo(HaveOccurred())
		addrs, _, _ := unstructured.NestedStringSlice(cur.Object, "spec", "addresses")
		g.Expect(addrs).To(Equal([]string{tp.Status.IPv4}))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
}

// deleteHeldPool makes pool name of range cidr, lets tenant namespace tenant-lb<name> hold a
// block of it, and deletes the pool.
func deleteHeldPool(ctx context.Context, t *testing.T, g Gomega, name, cidr string) {
	t.Helper()
	pool := MakePool(name, name).IPv4(30, cidr).Obj()
	create(ctx, t, pool, ts.TenantNamespace("tenant-lb"+name, name))
	readyPool(ctx, g, "tenant-lb"+name)
	g.Expect(k8s.Delete(ctx, pool)).To(Succeed())
}

func TestAPoolIsDeletedOnlyOnceNoBlockOfItIsHeld(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	deleteHeldPool(ctx, t, g, "gone", "198.51.101.128/28")
	g.Eventually(func(g Gomega) {
		cur := &netv1.LoadBalancerPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "gone"}, cur)).To(Succeed())
		g.Expect(conditions.Get(cur, "Ready")).To(HaveField("Message", "Waiting for 1 tenant namespaces to release their blocks"))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	_, err := getMetalLB(ctx, l2Advertisement, "gone")
	g.Expect(err).NotTo(HaveOccurred(), "the advertisement of a pool whose addresses are held is gone")

	ts.DropTenantLabel(ctx, t, k8s, "tenant-lbgone")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "gone"}, &netv1.LoadBalancerPool{}))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(BeTrue())
	_, err = getMetalLB(ctx, l2Advertisement, "gone")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the L2Advertisement outlived its pool: %v", err)
}

// A pool's deletion, reconciled from a cache that has not seen the IPAddressPool of a tenant's
// block yet (made moments before), keeps the pool: kube-apiserver is asked before it goes.
func TestAPoolWhoseHeldBlockTheCacheHasNotSeenStays(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	deleteHeldPool(ctx, t, g, "unseen", "198.51.107.0/28")
	// What the cache would answer before it sees the IPAddressPool: none.
	lagging := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if list.GetObjectKind().GroupVersionKind().Kind == metallb.IPAddressPoolGVK.Kind+"List" {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := &loadbalancerpool.Reconciler{Client: lagging, APIReader: k8s, Namespace: metallbNS}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "unseen"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "unseen"}, &netv1.LoadBalancerPool{})).To(Succeed(),
		"the pool went while a tenant holds a block of it")

	ts.DropTenantLabel(ctx, t, k8s, "tenant-lbunseen")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "unseen"}, &netv1.LoadBalancerPool{}))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(BeTrue())
}

// managers are the field managers that wrote an object.
func managers(u *unstructured.Unstructured) []string {
	var out []string
	for _, m := range u.GetManagedFields() {
		out = append(out, m.Manager)
	}
	return out
}

// owned is the net-controller's entry in an object's managed fields (what it applied, and when).
func owned(u *unstructured.Unstructured) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, m := range u.GetManagedFields() {
		if m.Manager == blocks.FieldOwner {
			out = append(out, m)
		}
	}
	return out
}

// A release reconciled from a cache that has not seen the Service holding an address of the block
// yet, nor MetalLB's count of it, keeps the block: kube-apiserver is asked before it goes.
func TestAReleaseFromACacheThatHasNotSeenAServiceKeepsTheBlock(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	svc := leavingWithAService(ctx, t, g, "unseensvc", "198.51.108.0/28")
	// What the cache would answer before it sees the Service and MetalLB's status: no Service, and
	// the IPAddressPool as the controller made it.
	lagging := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: listingNoService,
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == metallb.IPAddressPoolGVK {
				unstructured.RemoveNestedField(u.Object, "status")
			}
			return nil
		},
	})
	r := &tenantaddresspool.Reconciler{Client: lagging, APIReader: k8s, Namespace: metallbNS}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-unseensvc"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ownPools(ctx, g, "tenant-unseensvc")).To(HaveLen(1), "a pool a Service holds an address of was released")

	g.Expect(k8s.Delete(ctx, svc)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(ownPools(ctx, g, "tenant-unseensvc")).To(BeEmpty()) }).
		WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
}

// A release whose reads came just before MetalLB gave a Service an address of the block (no
// Service held one yet, the pool counted none) deletes nothing: the pool has changed since, and
// the deletion is conditional on the version read.
func TestAReleaseReadJustBeforeAnAddressWasGivenKeepsTheBlock(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	ns := "tenant-racedsvc"
	create(ctx, t, MakePool("racedsvc", "racedsvc").IPv4(30, "198.51.109.0/28").Obj(), ts.TenantNamespace(ns, "racedsvc"))
	readyPool(ctx, g, ns)
	pools := ownPools(ctx, g, ns)
	g.Expect(pools).To(HaveLen(1))
	key := types.NamespacedName{Namespace: metallbNS, Name: pools[0].Name}
	before := &unstructured.Unstructured{}
	before.SetGroupVersionKind(metallb.IPAddressPoolGVK)
	g.Expect(k8s.Get(ctx, key, before)).To(Succeed())
	svc := loadBalancer(ns, "web")
	create(ctx, t, svc)
	assigned(ctx, g, ns, "web")
	g.Eventually(func(g Gomega) { // MetalLB counts it in the pool's status
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(metallb.IPAddressPoolGVK)
		g.Expect(k8s.Get(ctx, key, live)).To(Succeed())
		n, _, _ := unstructured.NestedInt64(live.Object, "status", "assignedIPv4")
		g.Expect(n).To(BeEquivalentTo(1))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	ts.DropTenantLabel(ctx, t, k8s, ns)
	// What kube-apiserver answered just before: the pool as it was, and no Service holding an address.
	raced := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: listingNoService,
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == metallb.IPAddressPoolGVK {
				before.DeepCopyInto(u)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &tenantaddresspool.Reconciler{Client: k8s, APIReader: raced, Namespace: metallbNS}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: ns}})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "want a conflict, got %v", err)
	g.Expect(ownPools(ctx, g, ns)).To(HaveLen(1), "a pool a Service holds an address of was released")

	g.Expect(k8s.Delete(ctx, svc)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(ownPools(ctx, g, ns)).To(BeEmpty()) }).
		WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
}

// listingNoService answers a List of Services with none, as a read made before any Service held
// an address would; other Lists pass.
func listingNoService(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.ServiceList); ok {
		return nil
	}
	return c.List(ctx, list, opts...)
}

// leavingWithAService makes namespace tenant-<pool> a tenant's, with a block of a new pool of that
// name and a LoadBalancer Service MetalLB gives an address of it, then makes the namespace no
// longer a tenant's.
func leavingWithAService(ctx context.Context, t *testing.T, g Gomega, pool, cidr string) *corev1.Service {
	t.Helper()
	ns := "tenant-" + pool
	create(ctx, t, MakePool(pool, pool).IPv4(30, cidr).Obj(), ts.TenantNamespace(ns, pool))
	tp := readyPool(ctx, g, ns)
	svc := loadBalancer(ns, "web")
	create(ctx, t, svc)
	g.Expect(netip.MustParsePrefix(tp.Status.IPv4).Contains(assigned(ctx, g, ns, "web"))).To(BeTrue())
	ts.DropTenantLabel(ctx, t, k8s, ns)
	return svc
}

// A Service that stops being a load balancer gives its address back: the namespace's block is
// released then, though no Service was deleted.
func TestABlockIsReleasedWhenItsLastServiceStopsBeingALoadBalancer(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	svc := leavingWithAService(ctx, t, g, "demote", "198.51.104.0/28")
	tp := &netv1.TenantAddressPool{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-demote"}, tp)).To(Succeed())
		g.Expect(conditions.Get(tp, netv1.AddressPoolReadyCondition).Reason).To(Equal(netv1.AddressPoolInUseReason))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())

	// The Service becomes a ClusterIP one; MetalLB takes its address back.
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	g.Expect(k8s.Update(ctx, svc)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(ownPools(ctx, g, "tenant-demote")).To(BeEmpty()) }).
		WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
}

// An allocator that loses the race for a block retries and writes nothing meanwhile: its "choosing
// again" must not overwrite the status of the winner, which may be another replica serving the
// same namespace.
func TestALostRaceLeavesTheWinnersStatusAlone(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	create(ctx, t, MakePool("lost", "lost").IPv4(29, "198.51.106.0/29").Obj(), ts.TenantNamespace("tenant-lblost", "lost"))
	won := readyPool(ctx, g, "tenant-lblost")

	// The loser's view: the moment before the winner's IPAddressPool appeared.
	blind := interceptor.NewClient(k8s, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if ml, ok := list.(*metav1.PartialObjectMetadataList); ok && ml.Kind == "IPAddressPoolList" {
				ml.Items = nil
			}
			return nil
		},
	})
	loser := &tenantaddresspool.Reconciler{Client: blind, APIReader: blind, Namespace: metallbNS}
	_, err := loser.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-lblost"}})
	g.Expect(err).To(HaveOccurred(), "the block was taken: the loser retries")

	after := &netv1.TenantAddressPool{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-lblost"}, after)).To(Succeed())
	g.Expect(conditions.IsReady(after)).To(BeTrue(), "%v", after.Status.Conditions)
	g.Expect(after.ResourceVersion).To(Equal(won.ResourceVersion))
}
