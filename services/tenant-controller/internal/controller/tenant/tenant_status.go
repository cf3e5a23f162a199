package tenant

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// writeStatus is the one place a Tenant's status is written: it summarises the domain conditions
// into Ready/Reconciling/Stalled, patches only if something changed, and emits an event when
// Ready flips.
func (r *Reconciler) writeStatus(ctx context.Context, helper *patch.Helper, s *scope) error {
	t := s.tenant
	if t.DeletionTimestamp.IsZero() {
		conditions.Summarize(t, domainConditions, s.stall)
	}
	flipped := conditions.ReadyFlipped(helper.Before().(*tenancyv1.Tenant), t)
	if _, err := helper.Status(ctx, r.Client, t); err != nil {
		return err
	}
	if flipped != nil && r.Recorder != nil {
		kind := corev1.EventTypeNormal
		if flipped.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(t, nil, kind, flipped.Reason, "Reconcile", "%s", flipped.Message)
	}
	return nil
}
