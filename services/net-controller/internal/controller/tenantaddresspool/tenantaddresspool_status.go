package tenantaddresspool

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
)

// writeStatus is the one place a TenantAddressPool's status is written in the normal path: it
// summarises the domain conditions into Ready/Reconciling/Stalled, patches only when something
// changed, and posts an Event when Ready flips.
func (r *Reconciler) writeStatus(ctx context.Context, helper *patch.Helper, s *scope) error {
	conditions.Summarize(s.tp, domainConditions, s.stall)
	flipped := conditions.ReadyFlipped(helper.Before().(conditions.Setter), s.tp)
	if _, err := helper.Status(ctx, r.Client, s.tp); err != nil {
		return err
	}
	if flipped != nil && r.Recorder != nil {
		kind := corev1.EventTypeNormal
		if flipped.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(s.tp, nil, kind, flipped.Reason, "Reconcile", "%s", flipped.Message)
	}
	return nil
}
