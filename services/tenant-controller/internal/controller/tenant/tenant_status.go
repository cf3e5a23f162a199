package tenant

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
)

// writeStatus is the one place a Tenant's status is written: it summarises the domain conditions
// into Ready/Reconciling/Stalled, patches only if something changed, and emits an event when
// Ready flips (not when it is first established: creation is not news).
func (r *Reconciler) writeStatus(ctx context.Context, helper *patch.Helper, s *scope, wasReady *bool) error {
	t := s.tenant
	if t.DeletionTimestamp.IsZero() {
		conditions.Summarize(t, domainConditions, s.stall)
	}
	changed, err := helper.Status(ctx, r.Client, t)
	if err != nil || !changed || r.Recorder == nil {
		return err
	}
	if ready := conditions.Get(t, fmeta.ReadyCondition); ready != nil && wasReady != nil && *wasReady != (ready.Status == "True") {
		kind := corev1.EventTypeNormal
		if ready.Status != "True" {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(t, nil, kind, ready.Reason, "Reconcile", "%s", ready.Message)
	}
	return nil
}
