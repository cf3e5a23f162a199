// Package status writes a kstatus object's status once per reconcile: the deferred patch every
// Flotilla reconciler ends with.
package status

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
// Ready=True for a generation means the reconcile finished it: every domain condition was
// evaluated True for that generation (conditions.Summarize), and a reconcile that ended in an
// error leaves Ready True only where an earlier reconcile of the same generation had made it so
// (conditions.Unfinished). A stall is recorded, and ends the reconcile, as Stalled says.
//
// The patch is made only if obj is unchanged since it was read. A reconcile working from a stale
// copy (the cache has not yet seen an earlier reconcile's write) would otherwise write that
// write's conditions again, with new transition times, and announce its flip a second time. Then
// nothing is written and *res asks for another look after StaleRequeue, in place of the
// reconcile's outcome (see Write). Errors are joined into *retErr; an object deleted meanwhile is
// no error.
func (w Writer) Finish(ctx context.Context, helper *patch.Helper, obj Object, stall *conditions.Stall, res *ctrl.Result, retErr *error) {
	before := helper.Before().(conditions.Setter)
	if obj.GetDeletionTimestamp().IsZero() {
		switch {
		case stall != nil:
			stalledRes, stalledErr := Stalled(obj, *stall, *res)
			if *retErr == nil { // an error a retry may cure stands, and is retried
				*res, *retErr = stalledRes, stalledErr
			}
		default:
			conditions.Summarize(obj, w.Domain, nil)
			if *retErr != nil {
				conditions.Unfinished(obj, before, *retErr)
			}
		}
	}
	flipped := conditions.ReadyFlipped(before, obj)
	if Write(ctx, w.Client, helper, obj, res, retErr) && flipped != nil && w.Recorder != nil {
		kind := corev1.EventTypeNormal
		if flipped.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		w.Recorder.Eventf(obj, nil, kind, flipped.Reason, "Reconcile", "%s", flipped.Message)
	}
}

// Stalled is the one way a Flotilla reconcile ends when it cannot progress until a human changes
// something: the spec (stall's message names the field) or an object in the way. It marks obj
// Stalled=True and Ready=False with stall's reason, drops Reconciling and records the generation
// as observed (the verdict is about this spec), and returns the reconcile's outcome: a
// reconcile.TerminalError carrying stall, which controller-runtime does not retry (a change of
// the object, or of anything its controller watches, brings it back), unless res asks for
// another look later, which then stands with no error (controller-runtime ignores a requeue
// returned with an error). Writer.Finish calls it for the stall a reconcile recorded; a reconciler
// that writes its status with Write alone calls it itself.
func Stalled(obj conditions.Setter, stall conditions.Stall, res ctrl.Result) (ctrl.Result, error) {
	conditions.Summarize(obj, nil, &stall)
	if !res.IsZero() {
		return res, nil
	}
	return ctrl.Result{}, reconcile.TerminalError(stall)
}

// Write is Finish's write alone, for a reconciler that sets Ready itself and posts no Event: it
// patches obj's status only when it changed and obj is unchanged since it was read, and reports
// whether it wrote. A stale copy writes nothing, and *res asks for another look after
// StaleRequeue instead of the reconcile's outcome. Errors are joined into *retErr; an object
// deleted meanwhile is no error.
func Write(ctx context.Context, c client.Client, helper *patch.Helper, obj client.Object, res *ctrl.Result, retErr *error) bool {
	if behindOwnWrite(obj) {
		// A copy older than this process's last write: the status it read is not the object's,
		// even where the reconcile computed no change from it.
		*res, *retErr = ctrl.Result{RequeueAfter: StaleRequeue}, nil
		return false
	}
	wrote, err := helper.StatusIfCurrent(ctx, c, obj)
	if wrote {
		written.Store(obj.GetUID(), obj.GetResourceVersion())
	}
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

// written holds, per object, the resourceVersion of the last status this process wrote, until a
// reconcile reads a copy at least as new. A stale copy whose status differs from what the reconcile
// computes is caught by the write's conflict; one whose status is what the reconcile computes (a
// verdict flipped back before the cache saw the flip) writes nothing, and only this record tells
// that the object shows another status. Entries live only while the cache is behind.
var written sync.Map // types.UID → resourceVersion

// behindOwnWrite reports whether obj was read before this process's last status write to it.
// Resource versions of kube-apiserver's storage compare as numbers; where they do not, nothing is
// known and the record is dropped.
func behindOwnWrite(obj client.Object) bool {
	last, ok := written.Load(obj.GetUID())
	if !ok {
		return false
	}
	if cmp, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), last.(string)); err == nil && cmp < 0 {
		return true
	}
	written.Delete(obj.GetUID())
	return false
}
