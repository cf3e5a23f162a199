package noderouting_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// A LoadBalancerPool announced on eth2 asks for its replies to leave through eth2: the
// RoutingPolicy the net-controller derives from it (the same builder) is applied by the agent, and
// a reply from one of the pool's addresses, which the node holds (as kube-proxy's IPVS mode binds
// load-balancer addresses on a dummy interface), leaves through eth2 while everything else keeps
// the default route through eth1.
func TestRepliesFromALoadBalancerPoolLeaveThroughItsInterface(t *testing.T) {
	g := NewWithT(t)
	hs := agent(t, "node-lb")
	lo, err := hs.H.LinkByName("lo")
	g.Expect(err).NotTo(HaveOccurred())
	a, err := netlink.ParseAddr("198.51.100.10/32")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hs.H.AddrAdd(lo, a)).To(Succeed())
	g.Expect(hs.OutOf(t, "192.0.2.7", "198.51.100.10")).To(Equal("eth1"), "before the pool's routing")

	pool := &netv1.LoadBalancerPool{ObjectMeta: metav1.ObjectMeta{Name: "node-lb-public"}, Spec: netv1.LoadBalancerPoolSpec{
		IPv4:       &netv1.BlockRange{CIDRs: []string{"198.51.100.0/24"}, BlockPrefixLength: 29},
		Interfaces: []string{"eth2"},
		Routing: &netv1.PoolRouting{Interface: "eth2", IPv4Gateway: "10.2.0.1", Table: 150, Priority: 15000,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"case": "node-lb"}}},
	}}
	g.Expect(k8s.Create(context.Background(), metallb.RoutingPolicy(pool))).To(Succeed())
	g.Eventually(func(g Gomega) {
		nr := nodeRouting(g, "node-lb")
		g.Expect(conditions.IsReady(nr)).To(BeTrue(), "%v", nr.Status.Conditions)
		g.Expect(nr.Status.Policies).To(ContainElement(netv1.AppliedPolicy{Name: "lbpool-node-lb-public", Generation: 1}))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Expect(hs.OutOf(t, "192.0.2.7", "198.51.100.10")).To(Equal("eth2"))
	g.Expect(hs.OutOf(t, "192.0.2.7", "10.1.0.2")).To(Equal("eth1"), "traffic from other addresses")

	// A real reply from the pool's address crosses eth2's veth pair, not eth1's.
	rx := hs.Listen(t, "198.51.100.10")
	deadline := time.Now().Add(30 * time.Second)
	for rx.Count("peer2") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no packet from 198.51.100.10 arrived through eth2's pair")
		}
		hs.SendUDP(t, "198.51.100.10", "192.0.2.7", 9)
		time.Sleep(20 * time.Millisecond)
	}
	g.Expect(rx.Count("peer1")).To(BeZero(), "packets from the pool's address left through eth1")
}
