package tenantnetwork

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
)

// finishStatus is the one place a TenantNetwork's conditions are written (status.Writer):
// deferred at the end of every reconcile.
func (r *Reconciler) finishStatus(ctx context.Context, helper *patch.Helper, s *scope, res *ctrl.Result, retErr *error) {
	status.Writer{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}.Finish(ctx, helper, s.tn, s.stall, res, retErr)
}
