package patch

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helper remembers an object as it was read so that Status can write only what changed.
type Helper struct {
	before client.Object
}

// NewHelper snapshots obj; call it right after reading obj.
func NewHelper(obj client.Object) *Helper {
	return &Helper{before: obj.DeepCopyObject().(client.Object)}
}

// Before is the object as last read or written, for comparisons with what the reconcile changed.
func (h *Helper) Before() client.Object { return h.before }

// Status merge-patches obj's status subresource if its status differs from the snapshot, and
// reports whether it wrote. Finalizers and spec are never written here.
func (h *Helper) Status(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	return h.status(ctx, c, obj, false)
}

// StatusIfCurrent is Status for a writer that must know its status was computed from the latest
// object: the patch carries obj's resourceVersion, so when obj changed on the server since it was
// read (a reconcile working from a stale cache) nothing is written and the error is a Conflict
// (apierrors.IsConflict). What the writer does on success, such as posting an Event, then happens
// once per change, not once per stale copy.
func (h *Helper) StatusIfCurrent(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	return h.status(ctx, c, obj, true)
}

func (h *Helper) status(ctx context.Context, c client.Client, obj client.Object, current bool) (bool, error) {
	before, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h.before)
	if err != nil {
		return false, err
	}
	after, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return false, err
	}
	if equality.Semantic.DeepEqual(before["status"], after["status"]) {
		return false, nil
	}
	// Only the status goes into the patch: no resourceVersion, so no conflict with writes to the
	// object's metadata (finalizers) made earlier in the same reconcile.
	from, err := json.Marshal(map[string]any{"status": before["status"]})
	if err != nil {
		return false, err
	}
	target := map[string]any{"status": after["status"]}
	if current {
		target["metadata"] = map[string]any{"resourceVersion": obj.GetResourceVersion()}
	}
	to, err := json.Marshal(target)
	if err != nil {
		return false, err
	}
	data, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return false, err
	}
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // deleted since it was read: nothing left to report
		}
		// %w keeps apierrors.IsConflict working for StatusIfCurrent's callers.
		return false, fmt.Errorf("patching status: %w", err)
	}
	h.before = obj.DeepCopyObject().(client.Object)
	return true, nil
}
