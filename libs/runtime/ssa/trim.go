package ssa

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// TrimManagedFields is a cache transform (cache.Options.DefaultTransform) that keeps, of each
// object's managedFields, only the entries owner made by applying: all Apply extracts. The others
// (whoever created the object, status writers, kube-controller-manager's updates) are never read
// from the cache, and are often the larger part of an object there.
func TrimManagedFields(owner string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		o, ok := obj.(metav1.Object)
		if !ok { // a tombstone (DeletedFinalStateUnknown) keeps its object as it was
			return obj, nil
		}
		drop := func(e metav1.ManagedFieldsEntry) bool {
			return e.Manager != owner || e.Operation != metav1.ManagedFieldsOperationApply
		}
		// The object is fresh from the watch, the cache's alone: trimmed in place.
		if mf := o.GetManagedFields(); slices.ContainsFunc(mf, drop) {
			kept := slices.DeleteFunc(mf, drop)
			if len(kept) == 0 {
				kept = nil
			}
			o.SetManagedFields(kept)
		}
		return obj, nil
	}
}
