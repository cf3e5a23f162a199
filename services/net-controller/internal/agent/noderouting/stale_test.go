package noderouting_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/routingpolicy"
)

// A policy applied on its node is changed to a nodeSelector whose operator is Bogus, which the
// API accepts: the reconcile of the new generation fails before it looks at any node. kstatus, the
// judge of Flux, kubectl wait and Argo CD, must not call the policy Current for that generation
// (NodesApplied is generation 1's); it is Stalled, naming the field.
func TestABogusNodeSelectorIsNeverReadyForItsGeneration(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	agent(t, "node-c")
	g.Expect(k8s.Create(ctx, policy("node-c-bogus", "node-c", 10200, "eth2"))).To(Succeed())
	get := func(g Gomega) *netv1.RoutingPolicy {
		p := &netv1.RoutingPolicy{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "node-c-bogus"}, p)).To(Succeed())
		return p
	}
	g.Eventually(func(g Gomega) {
		p := get(g)
		g.Expect(conditions.IsReady(p)).To(BeTrue(), "%v", p.Status.Conditions)
		g.Expect(kstatusOf(g, p).Status).To(Equal(kstatus.CurrentStatus))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

	p := get(g)
	before := p.DeepCopy()
	p.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "case", Operator: "Bogus", Values: []string{"node-c"}}}}
	g.Expect(k8s.Patch(ctx, p, client.MergeFrom(before))).To(Succeed())
	g.Expect(p.Generation).To(BeEquivalentTo(2))

	// Once a reconcile of generation 2 wrote its verdict: not Current, and why.
	g.Eventually(func(g Gomega) {
		p := get(g)
		ready := conditions.Get(p, "Ready")
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.ObservedGeneration).To(BeEquivalentTo(2), "%v", p.Status.Conditions)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	p = get(g)
	res := kstatusOf(g, p)
	g.Expect(res.Status).NotTo(Equal(kstatus.CurrentStatus), "generation %d, observedGeneration %d, %v", p.Generation, p.Status.ObservedGeneration, p.Status.Conditions)
	g.Expect(res.Status).To(Equal(kstatus.FailedStatus))
	stalled := conditions.Get(p, "Stalled")
	g.Expect(stalled).NotTo(BeNil(), "%v", p.Status.Conditions)
	g.Expect(stalled.Reason).To(Equal(netv1.InvalidNodeSelectorReason))
	g.Expect(stalled.Message).To(ContainSubstring("spec.nodeSelector"))
	g.Expect(conditions.Get(p, routingpolicy.NodesAppliedCondition).ObservedGeneration).To(BeEquivalentTo(2))
	// And it stays so: no later reconcile (the node's report changes too) calls it Current.
	g.Consistently(func(g Gomega) {
		g.Expect(kstatusOf(g, get(g)).Status).To(Equal(kstatus.FailedStatus))
	}).WithTimeout(2 * time.Second).WithPolling(interval).Should(Succeed())
}

// kstatusOf is what kstatus computes for a policy.
func kstatusOf(g Gomega, p *netv1.RoutingPolicy) *kstatus.Result {
	res, err := testenv.KStatus(p)
	g.Expect(err).NotTo(HaveOccurred())
	return res
}
