package tenant_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A Current tenant's spec changes, and the reconciles of the new generation fail loading the
// tree (listing its children fails) before any condition is evaluated again. kstatus, the judge
// of Flux, kubectl wait and Argo CD, must not call the tenant Current for that generation; once
// the List works again, it is.
func TestAFailedReconcileIsNeverReadyForTheNewSpec(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	tn := MakeTenant("refused", "tenant-root").Quota("cpu", "1").Quota("count/pods", "1").Obj()
	createAll(ctx, g, tn)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), tn) })
	eventuallyCurrent(ctx, g, tn)

	failLists(t, "tenant-refused")
	before := lists.failed.Load()
	cur := get(ctx, g, tn)
	cur.Spec.Access = append(cur.Spec.Access, tenancyv1.AccessBinding{Role: tenancyv1.RoleView,
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}})
	g.Expect(k8s.Update(ctx, cur)).To(Succeed())

	// A reconcile of the new generation failed, and wrote its verdict once Ready is about it.
	g.Eventually(func(g Gomega) {
		got := get(ctx, g, tn)
		g.Expect(lists.failed.Load()).To(BeNumerically(">", before))
		g.Expect(condition(got, "Ready").ObservedGeneration).To(Equal(got.Generation), "%+v", got.Status.Conditions)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		got := get(ctx, g, tn)
		g.Expect(kstatus(g, got)).To(Equal(status.InProgressStatus),
			"generation %d, observedGeneration %d, %+v", got.Generation, got.Status.ObservedGeneration, got.Status.Conditions)
	}).WithTimeout(2 * time.Second).Should(Succeed())

	lists.namespace.Store(nil)
	eventuallyCurrent(ctx, g, tn)
}
