package tenantnetwork

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/tenants"
)

// finishStatus is the one place a TenantNetwork's conditions are written (tenants.StatusWriter):
// deferred at the end of every reconcile.
func (r *Reconciler) finishStatus(ctx context.Context, helper *patch.Helper, s *scope, res *ctrl.Result, retErr *error) {
	status := tenants.StatusWriter{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}
	status.Finish(ctx, helper, s.tn, s.stall, res, retErr)
}
