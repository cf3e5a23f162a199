package patch

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// AddFinalizer adds a finalizer to obj with a merge patch. The patch carries obj's
// resourceVersion: a finalizer list is replaced whole, so a concurrent change to it must conflict
// rather than be lost.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	return finalizers(ctx, c, obj, func() { controllerutil.AddFinalizer(obj, finalizer) })
}

// RemoveFinalizer removes a finalizer from obj with a merge patch (see AddFinalizer); an object
// already gone is no error.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	return client.IgnoreNotFound(finalizers(ctx, c, obj, func() { controllerutil.RemoveFinalizer(obj, finalizer) }))
}

func finalizers(ctx context.Context, c client.Client, obj client.Object, change func()) error {
	before := obj.DeepCopyObject().(client.Object)
	change()
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching finalizers: %w", err)
	}
	return nil
}
