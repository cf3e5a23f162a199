package tenant

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// writeStatus is the one place a Tenant's status is written: it summarises the domain conditions
// into Ready/Reconciling/Stalled, patches only if something changed, and posts one Event when Ready
// first becomes True and whenever it flips. The patch is made only if the tenant is unchanged since
// it was read: a reconcile working from a stale copy would otherwise repeat a flip an earlier
// reconcile already wrote and announced. stale reports that case; nothing was written.
func (r *Reconciler) writeStatus(ctx context.Context, helper *patch.Helper, s *scope) (stale bool, err error) {
	t := s.tenant
	if t.DeletionTimestamp.IsZero() {
		conditions.Summarize(t, domainConditions, s.stall)
	}
	flipped := conditions.ReadyFlipped(helper.Before().(*tenancyv1.Tenant), t)
	if _, err := helper.StatusIfCurrent(ctx, r.Client, t); err != nil {
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, err
	}
	if flipped != nil && r.Recorder != nil {
		kind := corev1.EventTypeNormal
		if flipped.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(t, nil, kind, flipped.Reason, "Reconcile", "%s", flipped.Message)
	}
	return false, nil
}
