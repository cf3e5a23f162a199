package tenantnetwork

import (
	"context"

	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/tenants"
)

// writeStatus is the one place a TenantNetwork's conditions are written: it summarises the domain
// conditions into Ready/Reconciling/Stalled, patches only when something changed, and posts an
// Event when Ready flips.
func (r *Reconciler) writeStatus(ctx context.Context, helper *patch.Helper, s *scope) error {
	status := tenants.StatusWriter{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}
	return status.Write(ctx, helper, s.tn, s.stall)
}
