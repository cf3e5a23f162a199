package tenants

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
)

// Report is the cluster-scoped object, named after a tenant namespace, in which a reconciler
// reports what it holds for the namespace (TenantSubnet, TenantAddressPool).
type Report interface {
	client.Object
	conditions.Setter
}

// Load reads the namespace (nil unless a live tenant's) and its report of type T (nil when there
// is none).
func Load[T any, P interface {
	*T
	Report
}](ctx context.Context, c client.Reader, name string) (*metav1.PartialObjectMetadata, P, error) {
	ns, err := Namespace(ctx, c, name)
	if err != nil {
		return nil, nil, err
	}
	var rep P = new(T)
	if err := c.Get(ctx, types.NamespacedName{Name: name}, rep); err != nil {
		return ns, nil, client.IgnoreNotFound(err)
	}
	return ns, rep, nil
}

// CreateReport creates a namespace's empty report; its creation brings the namespace back to the
// reconciler.
func CreateReport(ctx context.Context, c client.Client, rep Report, fieldOwner string) error {
	return client.IgnoreAlreadyExists(c.Create(ctx, rep, client.FieldOwner(fieldOwner)))
}

// StatusWriter writes a report's status once per reconcile.
type StatusWriter struct {
	Client   client.Client
	Recorder recorder.EventRecorder
	// Domain are the condition types summarised into Ready, in order.
	Domain []string
}

// Finish is the one place a report's status is written in the normal path, deferred at the end of
// a reconcile: it summarises the domain conditions into Ready/Reconciling/Stalled (unless the
// object is being deleted), patches only when something changed, and posts an Event when Ready
// flips. The patch is made only if obj is unchanged since it was read: a reconcile working from a
// stale copy (the cache has not seen an earlier reconcile's write yet) would announce that write's
// flip again. Then nothing is written and, unless the reconcile failed, *res asks for another look
// once the cache has caught up. Errors are joined into *retErr.
func (w StatusWriter) Finish(ctx context.Context, helper *patch.Helper, obj Report, stall *conditions.Stall, res *ctrl.Result, retErr *error) {
	if obj.GetDeletionTimestamp().IsZero() {
		conditions.Summarize(obj, w.Domain, stall)
	}
	flipped := conditions.ReadyFlipped(helper.Before().(conditions.Setter), obj)
	if _, err := helper.StatusIfCurrent(ctx, w.Client, obj); err != nil {
		if !apierrors.IsConflict(err) {
			*retErr = errors.Join(*retErr, err)
		} else if *retErr == nil {
			*res = ctrl.Result{RequeueAfter: staleRequeue}
		}
		return
	}
	if flipped != nil && w.Recorder != nil {
		kind := corev1.EventTypeNormal
		if flipped.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		w.Recorder.Eventf(obj, nil, kind, flipped.Reason, "Reconcile", "%s", flipped.Message)
	}
}

// staleRequeue is how soon a report whose reconcile worked from a stale copy is looked at again:
// long enough for the cache to catch up with the write that made it stale.
const staleRequeue = 200 * time.Millisecond
