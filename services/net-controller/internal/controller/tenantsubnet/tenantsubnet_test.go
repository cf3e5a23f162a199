package tenantsubnet_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/subnetpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantsubnet"
)

func TestTenantNamespaceGetsDualStackSubnet(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("dual", "dual").IPv4(24, "10.60.0.0/16").IPv6(64, "fd00:60::/48").Obj(),
		tenantNamespace("tenant-dual", "dual"))

	ts := readyTenantSubnet(ctx, g, "tenant-dual")
	g.Expect(ts.Status.Pool).To(Equal("dual"))
	g.Expect(netip.MustParsePrefix("10.60.0.0/16").Overlaps(netip.MustParsePrefix(ts.Status.IPv4))).To(BeTrue(), ts.Status.IPv4)
	g.Expect(netip.MustParsePrefix(ts.Status.IPv4).Bits()).To(Equal(24))
	g.Expect(netip.MustParsePrefix("fd00:60::/48").Overlaps(netip.MustParsePrefix(ts.Status.IPv6))).To(BeTrue(), ts.Status.IPv6)

	sn := &kubeovnv1.Subnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, sn)).To(Succeed())
	g.Expect(sn.Spec.Namespaces).To(Equal([]string{"tenant-dual"}))
	g.Expect(sn.Spec.Protocol).To(Equal("Dual"))
	g.Expect(sn.Spec.CIDRBlock).To(Equal(ts.Status.IPv4 + "," + ts.Status.IPv6))
	g.Expect(sn.Spec.GatewayType).To(Equal("distributed"))

	pool := &netv1.SubnetPool{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "dual"}, pool)).To(Succeed())
		g.Expect(conditions.IsReady(pool)).To(BeTrue())
		g.Expect(pool.Status.Allocated).To(BeEquivalentTo(1))
	}).WithTimeout(timeout).Should(Succeed())
	g.Expect(pool.Status.Blocks).To(BeEquivalentTo(256), "a /16 cut into /24s, paired with far more /64s")
}

func TestBlocksNeverOverlap(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("many", "many").IPv4(24, "10.61.0.0/21").Obj())
	for i := range 8 {
		create(ctx, t, tenantNamespace(fmt.Sprintf("tenant-many-%d", i), "many"))
	}
	seen := map[string]string{}
	for i := range 8 {
		ns := fmt.Sprintf("tenant-many-%d", i)
		ts := readyTenantSubnet(ctx, g, ns)
		g.Expect(seen).NotTo(HaveKey(ts.Status.IPv4), "%s and %s hold one block", ns, seen[ts.Status.IPv4])
		seen[ts.Status.IPv4] = ns
	}
}

func TestPoolExhaustedSaysSoWithNumbersThenServesAReleasedBlock(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("small", "small").IPv4(24, "10.62.0.0/23").Obj())
	names := []string{"tenant-small-a", "tenant-small-b", "tenant-small-c"}
	for _, n := range names {
		create(ctx, t, tenantNamespace(n, "small"))
	}
	var waiting string
	g.Eventually(func(g Gomega) {
		ready := 0
		waiting = ""
		for _, n := range names {
			ts := &netv1.TenantSubnet{}
			g.Expect(k8s.Get(ctx, types.NamespacedName{Name: n}, ts)).To(Succeed())
			if conditions.IsReady(ts) {
				ready++
				continue
			}
			c := conditions.Get(ts, netv1.AllocatedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(netv1.PoolExhaustedReason))
			g.Expect(c.Message).To(ContainSubstring("2 of 2 blocks are held (IPv4 /24)"))
			g.Expect(conditions.IsTrue(ts, "Stalled")).To(BeTrue())
			waiting = n
		}
		g.Expect(ready).To(Equal(2))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

	// A namespace that stops being a tenant's gives its empty block back; the waiting one gets it.
	var leaving string
	for _, n := range names {
		if n != waiting {
			leaving = n
			break
		}
	}
	gone := readyTenantSubnet(ctx, g, leaving).Status.IPv4
	dropTenantLabel(ctx, t, leaving)
	g.Expect(readyTenantSubnet(ctx, g, waiting).Status.IPv4).To(Equal(gone))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: leaving}, &netv1.TenantSubnet{}))
	}).WithTimeout(timeout).Should(BeTrue())
}

// leavingWithAnAddress makes namespace tenant-<pool> a tenant's, with a block of a new pool of
// that name and an address held in its Subnet (the IP Kube-OVN records for a pod holding it), then
// makes the namespace no longer a tenant's.
func leavingWithAnAddress(ctx context.Context, t *testing.T, g Gomega, pool, cidr, addr string) (*netv1.TenantSubnet, *kubeovnv1.IP) {
	t.Helper()
	ns := "tenant-" + pool
	create(ctx, t, MakePool(pool, pool).IPv4(24, cidr).Obj(), tenantNamespace(ns, pool))
	ts := readyTenantSubnet(ctx, g, ns)
	ip := &kubeovnv1.IP{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1." + ns, Labels: map[string]string{"ovn.kubernetes.io/subnet": ts.Status.Subnet}},
		Spec:       kubeovnv1.IPSpec{PodName: "vm1", Namespace: ns, Subnet: ts.Status.Subnet, V4IPAddress: addr},
	}
	create(ctx, t, ip)
	dropTenantLabel(ctx, t, ns)
	return ts, ip
}

func TestReleaseWaitsUntilNoAddressIsHeld(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	ts, ip := leavingWithAnAddress(ctx, t, g, "busy", "10.63.0.0/16", "10.63.0.5")

	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-busy"}, ts)).To(Succeed())
		c := conditions.Get(ts, netv1.SubnetReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(netv1.SubnetInUseReason))
		g.Expect(c.Message).To(ContainSubstring(ts.Status.Subnet + " holds 1 addresses"))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, &kubeovnv1.Subnet{})).To(Succeed(), "a subnet holding an address was released")

	g.Expect(k8s.Delete(ctx, ip)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, &kubeovnv1.Subnet{})) &&
			apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "tenant-busy"}, &netv1.TenantSubnet{}))
	}).WithTimeout(timeout).Should(BeTrue())
}

func TestASubnetNotMadeByTheControllerIsNeitherAdoptedNorReused(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	pool := MakePool("squat", "squat").IPv4(24, "10.64.0.0/22").Obj()
	// Someone else's Subnet has the name of the block the namespace would be given first.
	first, _ := blocks.Pick("tenant-squat", blocks.Blocks(pool), nil)
	foreign := &kubeovnv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: blocks.SubnetName("squat", first), Labels: map[string]string{"owner": "someone"}},
		Spec:       kubeovnv1.SubnetSpec{CIDRBlock: "172.30.0.0/24", Protocol: "IPv4"},
	}
	create(ctx, t, foreign, pool, tenantNamespace("tenant-squat", "squat"))

	ts := readyTenantSubnet(ctx, g, "tenant-squat")
	g.Expect(ts.Status.Subnet).NotTo(Equal(foreign.Name))
	after := &kubeovnv1.Subnet{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(foreign.ResourceVersion), "the foreign Subnet was written to")
}

func TestTwoAllocatorsNeverShareABlock(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	stop, err := startManager() // a second replica, with a cache of its own, beside the suite's
	g.Expect(err).NotTo(HaveOccurred())
	defer stop()
	create(ctx, t, MakePool("race", "race").IPv4(24, "10.65.0.0/20").Obj())
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("tenant-race-%d", i))
		create(ctx, t, tenantNamespace(names[i], "race"))
	}
	seen := map[string]string{}
	for _, n := range names {
		ts := readyTenantSubnet(ctx, g, n)
		g.Expect(seen).NotTo(HaveKey(ts.Status.IPv4), "%s and %s hold one block", n, seen[ts.Status.IPv4])
		seen[ts.Status.IPv4] = n
		// A namespace both replicas allocated for at once keeps one block and gives the other back.
		g.Eventually(func(g Gomega) { g.Expect(ownSubnets(ctx, g, n)).To(HaveLen(1)) }).WithTimeout(timeout).Should(Succeed())
	}
}

func TestAConvergedNamespaceCausesNoWriteAndSurvivesARestart(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("calm", "calm").IPv4(24, "10.66.0.0/16").IPv6(64, "fd00:66::/48").Obj(),
		tenantNamespace("tenant-calm", "calm"))
	ts := readyTenantSubnet(ctx, g, "tenant-calm")
	sn := &kubeovnv1.Subnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, sn)).To(Succeed())

	// A reconciler that remembers nothing, reading straight from kube-apiserver: what a restarted
	// controller does first. It finds the allocation and writes nothing.
	writes := &writeCounter{}
	fresh := &tenantsubnet.Reconciler{Client: writes.Wrap(k8s), APIReader: k8s}
	for range 2 {
		_, err := fresh.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-calm"}})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes.Calls()).To(BeEmpty(), "requests that write, at steady state")
	ts2 := &netv1.TenantSubnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-calm"}, ts2)).To(Succeed())
	g.Expect(ts2.ResourceVersion).To(Equal(ts.ResourceVersion), "the TenantSubnet was written at steady state")
	sn2 := &kubeovnv1.Subnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: sn.Name}, sn2)).To(Succeed())
	g.Expect(sn2.ResourceVersion).To(Equal(sn.ResourceVersion), "the Subnet was written at steady state")
	g.Expect(ownSubnets(ctx, g, "tenant-calm")).To(HaveLen(1))
}

func TestANamespaceNoPoolSelectsWaitsAndSaysWhy(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, tenantNamespace("tenant-nopool", "nopool"))
	g.Eventually(func(g Gomega) {
		ts := &netv1.TenantSubnet{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-nopool"}, ts)).To(Succeed())
		c := conditions.Get(ts, netv1.AllocatedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(netv1.NoPoolReason))
	}).WithTimeout(timeout).Should(Succeed())
	// The pool arrives: the namespace is served without any other change.
	create(ctx, t, MakePool("late", "nopool").IPv4(24, "10.67.0.0/16").Obj())
	g.Expect(strings.HasPrefix(readyTenantSubnet(ctx, g, "tenant-nopool").Status.IPv4, "10.67.")).To(BeTrue())
}

func TestAPoolIsDeletedOnlyOnceNoBlockOfItIsHeld(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	pool := MakePool("gone", "gone").IPv4(24, "10.68.0.0/16").Obj()
	create(ctx, t, pool, tenantNamespace("tenant-gone", "gone"))
	readyTenantSubnet(ctx, g, "tenant-gone")
	g.Expect(k8s.Delete(ctx, pool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &netv1.SubnetPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "gone"}, cur)).To(Succeed())
		g.Expect(conditions.Get(cur, "Ready")).To(HaveField("Message", "Waiting for 1 tenant namespaces to release their blocks"))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	// While it is held, a new pool over the same range hands out nothing.
	create(ctx, t, MakePool("gone-again", "gone-again").IPv4(24, "10.68.0.0/16").Obj())
	g.Eventually(func(g Gomega) {
		cur := &netv1.SubnetPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "gone-again"}, cur)).To(Succeed())
		g.Expect(conditions.IsTrue(cur, "Stalled")).To(BeTrue())
		g.Expect(conditions.Get(cur, "Ready").Reason).To(Equal(netv1.PoolOverlapReason))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

	dropTenantLabel(ctx, t, "tenant-gone")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "gone"}, &netv1.SubnetPool{}))
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		cur := &netv1.SubnetPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "gone-again"}, cur)).To(Succeed())
		g.Expect(conditions.IsReady(cur)).To(BeTrue(), "%v", cur.Status.Conditions)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// A pool's deletion, reconciled from a cache that has not seen the Subnet of a tenant's block yet
// (made moments before), keeps the pool: kube-apiserver is asked before it goes.
func TestAPoolWhoseHeldBlockTheCacheHasNotSeenStays(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	pool := MakePool("unseen", "unseen").IPv4(24, "10.71.0.0/16").Obj()
	create(ctx, t, pool, tenantNamespace("tenant-unseen", "unseen"))
	readyTenantSubnet(ctx, g, "tenant-unseen")
	g.Expect(k8s.Delete(ctx, pool)).To(Succeed())
	// What the cache would answer before it sees the Subnet: none.
	lagging := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*kubeovnv1.SubnetList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := &subnetpool.Reconciler{Client: lagging, APIReader: k8s}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "unseen"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "unseen"}, &netv1.SubnetPool{})).To(Succeed(),
		"the pool went while a tenant holds a block of it")

	dropTenantLabel(ctx, t, "tenant-unseen")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "unseen"}, &netv1.SubnetPool{}))
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
}

// A release reconciled from a cache that has not seen an address in the subnet yet (Kube-OVN made
// its IP moments before) keeps the subnet: kube-apiserver is asked before it goes.
func TestAReleaseFromACacheThatHasNotSeenAnAddressKeepsTheSubnet(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	ts, ip := leavingWithAnAddress(ctx, t, g, "unseenip", "10.73.0.0/24", "10.73.0.5")
	// What the cache would answer before it sees the IP: none.
	lagging := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*metav1.PartialObjectMetadataList); ok && l.GetObjectKind().GroupVersionKind().Kind == "IPList" {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := &tenantsubnet.Reconciler{Client: lagging, APIReader: k8s}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-unseenip"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, &kubeovnv1.Subnet{})).To(Succeed(), "a subnet holding an address was released")

	g.Expect(k8s.Delete(ctx, ip)).To(Succeed())
	eventuallyReleased(ctx, g, ts.Status.Subnet)
}

// A release reconciled from a cache whose copy of the Subnet predates Kube-OVN's count of an
// address it holds without an IP object (a VIP) keeps the subnet: the count is read live too.
func TestAReleaseFromACacheThatHasNotSeenAVIPKeepsTheSubnet(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("unseenvip", "unseenvip").IPv4(24, "10.74.0.0/24").Obj(), tenantNamespace("tenant-unseenvip", "unseenvip"))
	ts := readyTenantSubnet(ctx, g, "tenant-unseenvip")
	countVIPs(ctx, g, ts.Status.Subnet, 1) // Kube-OVN counts a VIP it handed out
	dropTenantLabel(ctx, t, "tenant-unseenvip")
	// What the cache would answer before it sees the count: the Subnet without it.
	lagging := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if l, ok := list.(*kubeovnv1.SubnetList); ok {
				for i := range l.Items {
					l.Items[i].Status = kubeovnv1.SubnetStatus{}
				}
			}
			return err
		},
	})
	r := &tenantsubnet.Reconciler{Client: lagging, APIReader: k8s}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-unseenvip"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, &kubeovnv1.Subnet{})).To(Succeed(), "a subnet holding a VIP was released")

	countVIPs(ctx, g, ts.Status.Subnet, 0)
	eventuallyReleased(ctx, g, ts.Status.Subnet)
}

// A release whose read of the Subnet came just before Kube-OVN counted an address it holds
// without an IP object (a VIP) deletes nothing: the Subnet has changed since, and the deletion is
// conditional on the version read.
func TestAReleaseReadJustBeforeAVIPWasCountedKeepsTheSubnet(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("racedvip", "racedvip").IPv4(24, "10.75.0.0/24").Obj(), tenantNamespace("tenant-racedvip", "racedvip"))
	ts := readyTenantSubnet(ctx, g, "tenant-racedvip")
	before := &kubeovnv1.Subnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, before)).To(Succeed())
	countVIPs(ctx, g, before.Name, 1) // Kube-OVN counts a VIP
	dropTenantLabel(ctx, t, "tenant-racedvip")
	// What kube-apiserver answered just before: the Subnet as it was.
	raced := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*kubeovnv1.SubnetList); ok {
				l.Items = []kubeovnv1.Subnet{*before.DeepCopy()}
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := &tenantsubnet.Reconciler{Client: k8s, APIReader: raced}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-racedvip"}})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "want a conflict, got %v", err)
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, &kubeovnv1.Subnet{})).To(Succeed(), "a subnet holding a VIP was released")

	countVIPs(ctx, g, before.Name, 0)
	eventuallyReleased(ctx, g, ts.Status.Subnet)
}

// Subnets are cached without their status. Kube-OVN's address counts in it deep-copy by writing
// into the cached original, which races between reconcilers reading the cache at once (go test
// -race caught it once a test gave a Subnet a count); nothing decided from the cache needs them.
func TestTheCacheKeepsSubnetsWithoutTheirStatus(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("counted", "counted").IPv4(24, "10.76.0.0/24").Obj(), tenantNamespace("tenant-counted", "counted"))
	ts := readyTenantSubnet(ctx, g, "tenant-counted")
	sn := &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: ts.Status.Subnet}}
	g.Expect(k8s.Status().Patch(ctx, sn, client.RawPatch(types.MergePatchType, []byte(`{"status":{"v4usingIPs":3,"v4availableIPs":250}}`)))).To(Succeed())

	opts := ctrl.Options{}
	tenantsubnet.CacheOptions(&opts)
	opts.Cache.Scheme = k8s.Scheme()
	c, err := cache.New(env.Config, opts.Cache)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	var wg sync.WaitGroup
	for range 4 { // readers at once, as the reconcilers are
		wg.Go(func() {
			for range 50 {
				list := &kubeovnv1.SubnetList{}
				if err := c.List(ctx, list); err != nil {
					t.Error(err)
					return
				}
				found := false
				for _, s := range list.Items {
					found = found || s.Name == sn.Name
					if s.Status.V4UsingIPs.Int64() != 0 || s.Status.V4AvailableIPs.Int64() != 0 {
						t.Errorf("the cache holds %s with its status: %+v", s.Name, s.Status)
						return
					}
				}
				if !found {
					t.Errorf("the cache does not hold %s", sn.Name)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestASubnetDeletedBySomeoneElseComesBackWithItsRange(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	pool := MakePool("back", "back").IPv4(24, "10.69.0.0/22").Obj()
	// The namespace's first choice is taken when it is allocated, so it gets another block ...
	first, _ := blocks.Pick("tenant-back", blocks.Blocks(pool), nil)
	squatter := &kubeovnv1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: blocks.SubnetName("back", first)},
		Spec:       kubeovnv1.SubnetSpec{CIDRBlock: "172.31.0.0/24", Protocol: "IPv4"},
	}
	create(ctx, t, squatter, pool, tenantNamespace("tenant-back", "back"))
	ts := readyTenantSubnet(ctx, g, "tenant-back")
	g.Expect(ts.Status.Subnet).NotTo(Equal(squatter.Name))
	// ... and keeps it when its first choice is free again and its Subnet is deleted by someone.
	g.Expect(k8s.Delete(ctx, squatter)).To(Succeed())
	sn := &kubeovnv1.Subnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, sn)).To(Succeed())
	g.Expect(k8s.Delete(ctx, sn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		back := &kubeovnv1.Subnet{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ts.Status.Subnet}, back)).To(Succeed())
		g.Expect(back.UID).NotTo(Equal(sn.UID))
		g.Expect(back.Spec.CIDRBlock).To(Equal(ts.Status.IPv4))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(ownSubnets(ctx, g, "tenant-back")).To(HaveLen(1))
	g.Expect(readyTenantSubnet(ctx, g, "tenant-back").Status.IPv4).To(Equal(ts.Status.IPv4))
}

// An allocator that loses the race for a block (it and another both saw the namespace without one
// and chose the same block; the other created it first) retries and writes nothing meanwhile: its
// "choosing again" must not overwrite the winner's status, which nothing would correct (a status
// change brings no reconcile), leaving a namespace that holds its block reported as not Ready.
func TestALostRaceLeavesTheWinnersStatusAlone(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("lost", "lost").IPv4(24, "10.70.0.0/24").Obj(), tenantNamespace("tenant-lost", "lost"))
	won := readyTenantSubnet(ctx, g, "tenant-lost")

	// The loser's view: the moment before the winner's Subnet appeared, in its cache and at
	// kube-apiserver alike.
	blind := interceptor.NewClient(k8s, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if sl, ok := list.(*kubeovnv1.SubnetList); ok {
				sl.Items = nil
			}
			return nil
		},
	})
	loser := &tenantsubnet.Reconciler{Client: blind, APIReader: blind}
	_, err := loser.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-lost"}})
	g.Expect(err).To(HaveOccurred(), "the block was taken: the loser retries")

	after := &netv1.TenantSubnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-lost"}, after)).To(Succeed())
	g.Expect(conditions.IsReady(after)).To(BeTrue(), "%v", after.Status.Conditions)
	g.Expect(after.ResourceVersion).To(Equal(won.ResourceVersion))
}

// A reconcile working from a copy of the TenantSubnet older than its status (the cache has not yet
// seen the write that made it Ready: the Subnet's own event often arrives first) writes nothing:
// it would announce Ready a second time, with a new transition time. It looks again shortly.
func TestAReconcileFromAStaleCopyWritesNothing(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, MakePool("stale", "stale").IPv4(24, "10.72.0.0/24").Obj(), tenantNamespace("tenant-stale", "stale"))
	ready := readyTenantSubnet(ctx, g, "tenant-stale")

	// What the cache held before the status write: no status.
	stale := ready.DeepCopy()
	stale.Status = netv1.TenantSubnetStatus{}
	lagging, err := testenv.Lagging(env.Config, k8s.Scheme(), stale)
	g.Expect(err).NotTo(HaveOccurred())
	r := &tenantsubnet.Reconciler{Client: lagging, APIReader: lagging}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "tenant-stale"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a stale copy is looked at again")

	after := &netv1.TenantSubnet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "tenant-stale"}, after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(ready.ResourceVersion), "the status was written again from a stale copy")
}
