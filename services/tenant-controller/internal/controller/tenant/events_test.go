package tenant_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A tenant's first Ready, and every later flip of Ready, each post exactly one Event.
func TestReadyFlipsPostOneEventEach(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	parent := MakeTenant("ev", "tenant-root").Quota("cpu", "4").Quota("count/pods", "10").Obj()
	kid := MakeTenant("kid", "tenant-ev").Quota("cpu", "2").Quota("count/pods", "5").Obj()
	createAll(ctx, g, parent, kid)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), parent) })
	eventuallyCurrent(ctx, g, parent, kid)
	uid := get(ctx, g, kid).UID

	// events lists the kid's Events as (type, reason), counting a series as its count.
	events := func(g Gomega) []string {
		list := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace(kid.Namespace))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.Regarding.UID != uid {
				continue
			}
			n := 1
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			for range n {
				out = append(out, e.Type+"/"+e.Reason)
			}
		}
		return out
	}
	g.Eventually(events).WithTimeout(30 * time.Second).Should(Equal([]string{corev1.EventTypeNormal + "/Succeeded"}))

	// Lowering the parent below the kid's share flips Ready to False: one Warning.
	setCPU := func(q string) {
		p := get(ctx, g, parent)
		p.Spec.ResourceQuotas[corev1.ResourceCPU] = resource.MustParse(q)
		g.Expect(k8s.Update(ctx, p)).To(Succeed())
	}
	setCPU("1")
	g.Eventually(func(g Gomega) {
		g.Expect(condition(get(ctx, g, kid), "Ready").Status).To(Equal(metav1.ConditionFalse))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(events).WithTimeout(30 * time.Second).Should(ConsistOf(
		corev1.EventTypeNormal+"/Succeeded", corev1.EventTypeWarning+"/"+tenancyv1.ParentQuotaExceededReason))

	// Raising it again flips Ready back: one more Normal.
	setCPU("4")
	eventuallyCurrent(ctx, g, kid)
	g.Eventually(events).WithTimeout(30 * time.Second).Should(ConsistOf(
		corev1.EventTypeNormal+"/Succeeded", corev1.EventTypeWarning+"/"+tenancyv1.ParentQuotaExceededReason,
		corev1.EventTypeNormal+"/Succeeded"))
	// And nothing more once converged.
	g.Consistently(events).WithTimeout(3 * time.Second).Should(HaveLen(3))
}

// The finalizer is on a new Tenant from its first version, added by kube-apiserver at admission
// (the chart's MutatingAdmissionPolicy), not by a write of the controller.
func TestFinalizerIsAddedAtAdmission(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	fin := MakeTenant("fin", "tenant-root").Quota("cpu", "1").Quota("count/pods", "1").Obj()
	fin.Finalizers = []string{"example.com/other"}
	g.Expect(k8s.Create(ctx, fin)).To(Succeed())
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), fin) })
	// The create response is the object as stored, before any reconcile.
	g.Expect(fin.Finalizers).To(ConsistOf("example.com/other", tenancyv1.Finalizer))
	g.Expect(fin.Generation).To(BeEquivalentTo(1))
	eventuallyCurrent(ctx, g, fin)
	g.Expect(get(ctx, g, fin).Finalizers).To(ConsistOf("example.com/other", tenancyv1.Finalizer))
	// Let the deletion finish: the other finalizer is the test's.
	t.Cleanup(func() {
		cur := &tenancyv1.Tenant{}
		if k8s.Get(context.Background(), client.ObjectKeyFromObject(fin), cur) == nil {
			cur.Finalizers = []string{tenancyv1.Finalizer}
			_ = k8s.Update(context.Background(), cur)
		}
	})
}
