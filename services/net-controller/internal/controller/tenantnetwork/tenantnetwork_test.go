package tenantnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantnetwork"
	support "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
)

const (
	timeout  = support.Timeout
	interval = support.Interval
)

var ctxFor = support.Ctx

// NetworkBuilder builds TenantNetworks: MakeNetwork("net", "tenant-a", "10.0.0.0/24").SNAT().Obj().
type NetworkBuilder struct{ n netv1.TenantNetwork }

func MakeNetwork(name, ns, cidr string) *NetworkBuilder {
	return &NetworkBuilder{n: netv1.TenantNetwork{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: netv1.TenantNetworkSpec{CIDR: cidr}}}
}
func (b *NetworkBuilder) SNAT() *NetworkBuilder { b.n.Spec.SNAT = true; return b }
func (b *NetworkBuilder) Floating(name, ip string) *NetworkBuilder {
	b.n.Spec.FloatingIPs = append(b.n.Spec.FloatingIPs, netv1.FloatingIP{Name: name, InternalIP: ip})
	return b
}
func (b *NetworkBuilder) Obj() *netv1.TenantNetwork { return b.n.DeepCopy() }

func create(ctx context.Context, t *testing.T, objs ...client.Object) {
	t.Helper()
	support.Create(ctx, t, k8s, objs...)
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func ready(ctx context.Context, g Gomega, ns, name string) *netv1.TenantNetwork {
	return support.Ready[netv1.TenantNetwork](ctx, g, k8s, types.NamespacedName{Namespace: ns, Name: name})
}

func nbctl(g Gomega, args ...string) string {
	out, err := ovnProcs.Nbctl(args...)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

func TestTwoTenantsWithTheSameRangeAreProgrammedApart(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, namespace("tenant-x"), namespace("tenant-y"),
		MakeNetwork("net", "tenant-x", "192.168.10.0/24").SNAT().Floating("web", "192.168.10.5").Obj(),
		MakeNetwork("net", "tenant-y", "192.168.10.0/24").SNAT().Floating("web", "192.168.10.5").Obj())
	x, y := ready(ctx, g, "tenant-x", "net"), ready(ctx, g, "tenant-y", "net")

	g.Expect(x.Status.Router).NotTo(Equal(y.Status.Router))
	held := map[string]bool{}
	for _, tn := range []*netv1.TenantNetwork{x, y} {
		g.Expect(tn.Status.FloatingIPs).To(HaveLen(1))
		for _, a := range []string{tn.Status.SNATIP, tn.Status.FloatingIPs[0].ExternalIP} {
			g.Expect(external.Contains(mustAddr(a))).To(BeTrue(), a)
			g.Expect(held).NotTo(HaveKey(a), "one external address given twice")
			held[a] = true
		}
		nat := nbctl(g, "lr-nat-list", tn.Status.Router)
		g.Expect(nat).To(ContainSubstring(tn.Status.SNATIP))
		g.Expect(nat).To(ContainSubstring(tn.Status.FloatingIPs[0].ExternalIP))
	}
	// northd made the NAT flows of each router in SB.
	nbctl(g, "--wait=sb", "sync")
	for _, tn := range []*netv1.TenantNetwork{x, y} {
		flows, err := ovnProcs.Sbctl("lflow-list", tn.Status.Router)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(flows).To(ContainSubstring("ct_snat(" + tn.Status.SNATIP + ")"))
		g.Expect(flows).To(ContainSubstring("ct_dnat(192.168.10.5)"))
	}
}

func TestRowsRemovedBySomeoneElseAreRestoredAndCounted(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, namespace("tenant-fix"), MakeNetwork("net", "tenant-fix", "10.9.0.0/24").SNAT().Obj())
	tn := ready(ctx, g, "tenant-fix", "net")
	before := tenantnetwork.Restored()

	nbctl(g, "lr-nat-del", tn.Status.Router, "snat", "10.9.0.0/24")
	g.Eventually(func() string { return nbctl(g, "lr-nat-list", tn.Status.Router) }).
		WithTimeout(timeout).WithPolling(interval).Should(ContainSubstring(tn.Status.SNATIP))
	g.Eventually(tenantnetwork.Restored).WithTimeout(timeout).Should(BeNumerically(">", before))

	nbctl(g, "lr-del", tn.Status.Router) // the router, its ports and NAT rows
	g.Eventually(func(g Gomega) {
		g.Expect(nbctl(g, "lr-nat-list", tn.Status.Router)).To(ContainSubstring(tn.Status.SNATIP))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

func TestAConvergedNetworkCausesNoTransactionAndNoWrite(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, namespace("tenant-calm"), MakeNetwork("net", "tenant-calm", "10.8.0.0/24").SNAT().Floating("db", "10.8.0.7").Obj())
	ready(ctx, g, "tenant-calm", "net")

	writes := &support.WriteCounter{}
	fresh := &tenantnetwork.Reconciler{Client: writes.Wrap(k8s), APIReader: k8s, NB: nb, External: external, PerNamespace: perNamespace}
	txns := nb.Transactions()
	for range 2 {
		_, err := fresh.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "tenant-calm", Name: "net"}})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(nb.Transactions()).To(Equal(txns), "OVN transactions at steady state")
	g.Expect(writes.Calls()).To(BeEmpty(), "API writes at steady state")
}

func TestTooManyAddressesForTheNamespaceSaysSoWithNumbers(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, namespace("tenant-greedy"), MakeNetwork("net", "tenant-greedy", "10.7.0.0/24").SNAT().
		Floating("a", "10.7.0.2").Floating("b", "10.7.0.3").Floating("c", "10.7.0.4").Obj())
	g.Eventually(func(g Gomega) {
		tn := &netv1.TenantNetwork{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-greedy", Name: "net"}, tn)).To(Succeed())
		c := conditions.Get(tn, netv1.AddressesReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(netv1.AddressesExhaustedReason))
		g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("may hold %d external addresses; its other networks hold 0 and this one needs 4", perNamespace)))
		g.Expect(conditions.IsTrue(tn, "Stalled")).To(BeTrue())
		g.Expect(tn.Status.ObservedGeneration).To(Equal(tn.Generation))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(nbctl(g, "--bare", "--columns=name", "list", "Logical_Router")).NotTo(ContainSubstring("tenant-greedy"))
}

func TestDeletingANetworkRemovesItsRowsOnceNoWorkloadIsAttached(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, namespace("tenant-bye"), MakeNetwork("net", "tenant-bye", "10.6.0.0/24").SNAT().Obj())
	tn := ready(ctx, g, "tenant-bye", "net")
	nbctl(g, "lsp-add", tn.Status.Switch, "vm-bye") // a workload attached by someone else

	g.Expect(k8s.Delete(ctx, tn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &netv1.TenantNetwork{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(tn), cur)).To(Succeed())
		g.Expect(conditions.Get(cur, "Ready")).To(HaveField("Message", ContainSubstring("workload ports")))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(nbctl(g, "ls-list")).To(ContainSubstring(tn.Status.Switch))

	nbctl(g, "lsp-del", "vm-bye")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(tn), &netv1.TenantNetwork{}))
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
	g.Expect(nbctl(g, "ls-list")).NotTo(ContainSubstring(tn.Status.Switch))
	g.Expect(nbctl(g, "--bare", "--columns=name", "list", "Logical_Router")).NotTo(ContainSubstring(tn.Status.Router))
}

func TestTheControllerConvergesAfterTheDatabaseIsKilledAndRestarted(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	create(ctx, t, namespace("tenant-crash"), namespace("tenant-crash2"))
	// The database is killed while the controller works through a stream of networks: one is
	// programmed, the others are under way or queued.
	for i := range 3 {
		create(ctx, t, MakeNetwork(fmt.Sprintf("net%d", i), "tenant-crash", "10.5.0.0/24").SNAT().Obj())
	}
	ready(ctx, g, "tenant-crash", "net0")
	g.Expect(ovnProcs.KillDB("nb")).To(Succeed())
	create(ctx, t, MakeNetwork("late", "tenant-crash2", "10.5.0.0/24").Obj())
	g.Eventually(func(g Gomega) {
		tn := &netv1.TenantNetwork{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-crash2", Name: "late"}, tn)).To(Succeed())
		g.Expect(conditions.Get(tn, netv1.OVNReadyCondition)).NotTo(BeNil())
		g.Expect(conditions.Get(tn, netv1.OVNReadyCondition).Reason).To(Equal(netv1.OVNUnavailableReason))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(ovnProcs.StartDB("nb")).To(Succeed())
	routers := []string{}
	for _, k := range []types.NamespacedName{{Namespace: "tenant-crash", Name: "net0"}, {Namespace: "tenant-crash", Name: "net1"},
		{Namespace: "tenant-crash", Name: "net2"}, {Namespace: "tenant-crash2", Name: "late"}} {
		tn := ready(ctx, g, k.Namespace, k.Name)
		routers = append(routers, tn.Status.Router)
		// Exactly one router and one switch per network: no duplicate rows after the restart.
		g.Expect(strings.Count(nbctl(g, "--bare", "--columns=name", "list", "Logical_Router"), tn.Status.Router+"\n")).To(Equal(1))
		g.Expect(strings.Count(nbctl(g, "ls-list"), "("+tn.Status.Switch+")")).To(Equal(1))
	}
	g.Expect(routers).To(HaveLen(4))
}

// The status is the ledger of the addresses a network holds: a reconcile working from a copy older
// than its last write (the cache had not caught up) must neither hand the network other addresses
// nor write anything, and must look again.
func TestAReconcileFromAStaleCopyKeepsTheLedger(t *testing.T) {
	g, ctx := NewWithT(t), ctxFor(t)
	// Another network holds addresses below the one's under test, then lets them go: a reconcile
	// that forgot what the network holds would take those.
	create(ctx, t, namespace("tenant-stale0"), MakeNetwork("net", "tenant-stale0", "10.4.0.0/24").SNAT().Obj())
	earlier := ready(ctx, g, "tenant-stale0", "net")
	create(ctx, t, namespace("tenant-stale"), MakeNetwork("net", "tenant-stale", "10.4.0.0/24").SNAT().Floating("web", "10.4.0.9").Obj())
	live := ready(ctx, g, "tenant-stale", "net")
	g.Expect(k8s.Delete(ctx, earlier)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(earlier), &netv1.TenantNetwork{}))
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue())

	stale := live.DeepCopy()
	stale.Status = netv1.TenantNetworkStatus{} // as read before the addresses were recorded
	lagging, err := testenv.Lagging(env.Config, k8s.Scheme(), stale)
	g.Expect(err).NotTo(HaveOccurred())
	r := &tenantnetwork.Reconciler{Client: lagging, APIReader: k8s, NB: nb, External: external, PerNamespace: perNamespace}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(live)})

	after := &netv1.TenantNetwork{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(live), after)).To(Succeed())
	g.Expect(after.Status.SNATIP).To(Equal(live.Status.SNATIP))
	g.Expect(after.Status.FloatingIPs).To(Equal(live.Status.FloatingIPs))
	g.Expect(after.ResourceVersion).To(Equal(live.ResourceVersion), "written from a stale copy")
	g.Expect(err != nil || res.RequeueAfter > 0).To(BeTrue(), "a stale copy is not looked at again")
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
