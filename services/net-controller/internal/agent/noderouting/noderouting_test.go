package noderouting_test

import (
	"context"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/agent/noderouting"
	support "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/nstest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/routing"
)

const (
	timeout  = time.Minute
	interval = 50 * time.Millisecond
)

// agent runs the node agent's reconciler for a node on a fresh host, as the binary does.
func agent(t *testing.T, node string) *nstest.Host {
	t.Helper()
	g := NewWithT(t)
	hs := nstest.NewHost(t)
	g.Expect(k8s.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"case": node}}})).To(Succeed())
	changes, stop, err := routing.Watch(hs.NS)
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: k8s.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&noderouting.Reconciler{Client: mgr.GetClient(), NodeName: node, Applier: &routing.Applier{H: hs.H}, Changes: changes}).
		SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done; stop() })
	return hs
}

// policy sends replies from eth2's address out of eth2, on the nodes of one test.
func policy(name, node string, prio int32, device string) *netv1.RoutingPolicy {
	return &netv1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.RoutingPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"case": node}},
		Rules:        []netv1.Rule{{Priority: prio, From: "10.2.0.2/32", Table: 100}},
		Routes:       []netv1.Route{{Table: 100, Destination: "0.0.0.0/0", Gateway: "10.2.0.1", Device: device}},
	}}
}

func nodeRouting(g Gomega, node string) *netv1.NodeRouting {
	nr := &netv1.NodeRouting{}
	g.Expect(k8s.Get(context.Background(), types.NamespacedName{Name: node}, nr)).To(Succeed())
	return nr
}

func TestANodeAppliesItsPolicyAndReportsIt(t *testing.T) {
	g := NewWithT(t)
	hs := agent(t, "node-a")
	g.Expect(k8s.Create(context.Background(), policy("node-a-storage", "node-a", 10000, "eth2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		nr := nodeRouting(g, "node-a")
		g.Expect(conditions.IsReady(nr)).To(BeTrue(), "%v", nr.Status.Conditions)
		g.Expect(nr.Status.Policies).To(HaveLen(1))
		g.Expect(nr.Status.Policies[0].Name).To(Equal("node-a-storage"))
		g.Expect(nr.Status.Policies[0].Generation).To(BeEquivalentTo(1))
		g.Expect(nr.Status.Rules).To(BeEquivalentTo(1))
		g.Expect(nr.Status.Routes).To(BeEquivalentTo(1))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(hs.OutOf(t, "192.0.2.7", "10.2.0.2")).To(Equal("eth2"))
	// The policy is Ready once its one node applied it.
	g.Eventually(func(g Gomega) {
		p := &netv1.RoutingPolicy{}
		g.Expect(k8s.Get(context.Background(), types.NamespacedName{Name: "node-a-storage"}, p)).To(Succeed())
		g.Expect(conditions.IsReady(p)).To(BeTrue(), "%v", p.Status.Conditions)
		g.Expect(conditions.Get(p, "Ready").Message).To(Equal("Reconciliation succeeded"))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

	// Someone deletes the rule: it comes back.
	r := netlink.NewRule()
	r.Priority, r.Table, r.Family = 10000, 100, netlink.FAMILY_V4
	_, r.Src, _ = net.ParseCIDR("10.2.0.2/32")
	g.Expect(hs.H.RuleDel(r)).To(Succeed())
	g.Eventually(func() string { return hs.OutOf(t, "192.0.2.7", "10.2.0.2") }).WithTimeout(timeout).WithPolling(interval).Should(Equal("eth2"))

	// Converged: a reconcile writes nothing, to the API or to the kernel.
	writes := &support.WriteCounter{}
	fresh := &noderouting.Reconciler{Client: writes.Wrap(k8s), NodeName: "node-a", Applier: &routing.Applier{H: hs.H}}
	_, err := fresh.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "node-a"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes.Calls()).To(BeEmpty())
	want := routing.Desired([]netv1.RoutingPolicy{*policy("node-a-storage", "node-a", 10000, "eth2")}, map[string]string{"case": "node-a"}, fresh.Applier.Links)
	n, err := fresh.Applier.Apply(want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero())
}

func TestAPolicyNamingAnUnknownInterfaceIsReportedPerNode(t *testing.T) {
	g := NewWithT(t)
	hs := agent(t, "node-b")
	g.Expect(k8s.Create(context.Background(), policy("node-b-typo", "node-b", 10100, "eth9"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		nr := nodeRouting(g, "node-b")
		g.Expect(conditions.IsTrue(nr, "Stalled")).To(BeTrue(), "%v", nr.Status.Conditions)
		c := conditions.Get(nr, netv1.AppliedCondition)
		g.Expect(c.Reason).To(Equal(netv1.UnknownInterfaceReason))
		g.Expect(c.Message).To(ContainSubstring("spec.routes[0].device names interface eth9"))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	routes, err := hs.H.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 100}, netlink.RT_FILTER_TABLE)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes).To(BeEmpty(), "a refused policy left a route")
	// The policy says which node refused it, and why.
	g.Eventually(func(g Gomega) {
		p := &netv1.RoutingPolicy{}
		g.Expect(k8s.Get(context.Background(), types.NamespacedName{Name: "node-b-typo"}, p)).To(Succeed())
		g.Expect(conditions.IsTrue(p, "Stalled")).To(BeTrue(), "%v", p.Status.Conditions)
		g.Expect(conditions.Get(p, "Ready").Message).To(Equal(
			"Refused by 1 of 1 nodes: node-b: RoutingPolicy node-b-typo: spec.routes[0].device names interface eth9, which the node does not have"))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}
