// Package status writes a kstatus object's status once per reconcile: the deferred patch every
// Flotilla reconciler ends with.
package status

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
)

// Object is what a Writer writes: an object with kstatus conditions and a status subresource.
type Object interface {
	client.Object
	conditions.Setter
}

// Writer writes a reconciled object's status.
type Writer struct {
	Client client.Client
	// Recorder, when set, is told each time Ready flips (and when a new object is first Ready).
	Recorder recorder.EventRecorder
	// Domain are the condition types summarised into Ready, in order of importance.
	Domain []string
}

// StaleRequeue is how soon an object whose reconcile worked from a stale copy is looked at again:
// long enough for the cache to catch up with the write that made the copy stale.
const StaleRequeue = 200 * time.Millisecond

// Finish is deferred at the end of a reconcile. It summarises the domain conditions into
// Ready/Reconciling/Stalled (not while obj is being deleted: the delete path marks that with
// conditions.MarkDeleting), patches the status only when something changed, and posts one Event
// when Ready flips.
//
// The patch is made only if obj is unchanged since it was read. A reconcile working from a stale
// copy (the cache has not yet seen an earlier reconcile's write) would otherwise write that
// write's conditions again, with new transition times, and announce its flip a second time. Then
// nothing is written and *res asks for another look after StaleRequeue, in place of the
// reconcile's outcome (see Write). Errors are joined into *retErr; an object deleted meanwhile is
// no error.
func (w Writer) Finish(ctx context.Context, helper *patch.Helper, obj Object, stall *conditions.Stall, res *ctrl.Result, retErr *error) {
	if obj.GetDeletionTimestamp().IsZero() {
		conditions.Summarize(obj, w.Domain, stall)
	}
	flipped := conditions.ReadyFlipped(helper.Before().(conditions.Setter), obj)
	if Write(ctx, w.Client, helper, obj, res, retErr) && flipped != nil && w.Recorder != nil {
		kind := corev1.EventTypeNormal
		if flipped.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		w.Recorder.Eventf(obj, nil, kind, flipped.Reason, "Reconcile", "%s", flipped.Message)
	}
}

// Write is Finish's write alone, for a reconciler that sets Ready itself and posts no Event: it
// patches obj's status only when it changed and obj is unchanged since it was read, and reports
// whether it wrote. A stale copy writes nothing, and *res asks for another look after
// StaleRequeue instead of the reconcile's outcome. Errors are joined into *retErr; an object
// deleted meanwhile is no error.
func Write(ctx context.Context, c client.Client, helper *patch.Helper, obj client.Object, res *ctrl.Result, retErr *error) bool {
	wrote, err := helper.StatusIfCurrent(ctx, c, obj)
	switch {
	case apierrors.IsConflict(err):
		// Whatever the reconcile concluded from the stale copy, an error included, is judged
		// again on a fresh one. Its error is dropped: controller-runtime ignores a requeue
		// returned with an error, and never retries a terminal one.
		*res, *retErr = ctrl.Result{RequeueAfter: StaleRequeue}, nil
	case err != nil:
		*retErr = errors.Join(*retErr, err)
	}
	return wrote
}
