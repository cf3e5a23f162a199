package tenantaddresspool_test

import (
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	ts "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
)

// A pool's routing becomes a RoutingPolicy the node agents apply: a rule per CIDR, a default route
// per family out of the pool's interface; it follows the pool and goes when the pool stops asking.
func TestAPoolsRoutingBecomesARoutingPolicy(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	pool := MakePool("routed", "routed").IPv4(29, "198.51.102.0/25", "198.51.102.128/25").IPv6(120, "fd00:5102::/112").Interfaces("eth2").Obj()
	pool.Spec.Routing = &netv1.PoolRouting{Interface: "eth2", IPv4Gateway: "10.2.0.1", IPv6Gateway: "fd00:2::1", Table: 150, Priority: 15000,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"net.flotilla.dev/public": "true"}}}
	create(ctx, t, pool)

	rp := &netv1.RoutingPolicy{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "lbpool-routed"}, rp)).To(Succeed())
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	g.Expect(rp.Spec.Rules).To(Equal([]netv1.Rule{
		{Priority: 15000, From: "198.51.102.0/25", Table: 150},
		{Priority: 15001, From: "198.51.102.128/25", Table: 150},
		{Priority: 15002, From: "fd00:5102::/112", Table: 150},
	}))
	g.Expect(rp.Spec.Routes).To(Equal([]netv1.Route{
		{Table: 150, Destination: "0.0.0.0/0", Gateway: "10.2.0.1", Device: "eth2"},
		{Table: 150, Destination: "::/0", Gateway: "fd00:2::1", Device: "eth2"},
	}))
	g.Expect(rp.Spec.NodeSelector).To(Equal(pool.Spec.Routing.NodeSelector))
	g.Expect(metav1.IsControlledBy(rp, pool)).To(BeTrue(), "owner references: %v", rp.OwnerReferences)
	g.Eventually(func(g Gomega) {
		cur := &netv1.LoadBalancerPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "routed"}, cur)).To(Succeed())
		g.Expect(conditions.IsReady(cur)).To(BeTrue(), "%v", cur.Status.Conditions)
		g.Expect(conditions.Get(cur, netv1.RoutedCondition).Message).To(Equal(
			"RoutingPolicy lbpool-routed sends replies from the pool's addresses out of eth2 (table 150)"))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())

	// Someone deletes it: it comes back.
	g.Expect(k8s.Delete(ctx, rp)).To(Succeed())
	g.Eventually(func(g Gomega) {
		back := &netv1.RoutingPolicy{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "lbpool-routed"}, back)).To(Succeed())
		g.Expect(back.UID).NotTo(Equal(rp.UID))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())

	// The pool's interface changes: the policy follows.
	cur := &netv1.LoadBalancerPool{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "routed"}, cur)).To(Succeed())
	before := cur.DeepCopy()
	cur.Spec.Interfaces, cur.Spec.Routing.Interface = []string{"eth3"}, "eth3"
	g.Expect(k8s.Patch(ctx, cur, client.MergeFrom(before))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "lbpool-routed"}, rp)).To(Succeed())
		g.Expect(rp.Spec.Routes[0].Device).To(Equal("eth3"))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())

	// It stops asking: the policy goes.
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "routed"}, cur)).To(Succeed())
	before = cur.DeepCopy()
	cur.Spec.Routing = nil
	g.Expect(k8s.Patch(ctx, cur, client.MergeFrom(before))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "lbpool-routed"}, &netv1.RoutingPolicy{}))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(BeTrue())
}

func TestARoutingPolicyNotMadeByTheControllerIsLeftAlone(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	foreign := &netv1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "lbpool-taken"}, Spec: netv1.RoutingPolicySpec{
		Rules: []netv1.Rule{{Priority: 16000, From: "10.9.0.0/24", Table: 160}}}}
	pool := MakePool("taken", "taken").IPv4(29, "198.51.103.0/24").Obj()
	pool.Spec.Routing = &netv1.PoolRouting{Interface: "eth2", Table: 151, Priority: 15100}
	create(ctx, t, foreign, pool)
	g.Eventually(func(g Gomega) {
		cur := &netv1.LoadBalancerPool{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "taken"}, cur)).To(Succeed())
		g.Expect(conditions.IsTrue(cur, "Stalled")).To(BeTrue(), "%v", cur.Status.Conditions)
		g.Expect(conditions.Get(cur, netv1.RoutedCondition).Reason).To(Equal(netv1.NotOwnedReason))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	after := &netv1.RoutingPolicy{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "lbpool-taken"}, after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(foreign.ResourceVersion))
	// Deleting the pool leaves it too.
	g.Expect(k8s.Delete(ctx, pool)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "taken"}, &netv1.LoadBalancerPool{}))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(BeTrue())
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "lbpool-taken"}, after)).To(Succeed())
}
