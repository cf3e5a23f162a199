package storage

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Get reads key from cached (the manager's cache), and from api (the API server) when the cache
// has not seen it yet: an object created moments ago reaches the cache moments later, and taken
// for missing it would let a webhook refuse or mis-place a pod, or the extender send a pod where
// its volume can never be attached. api may be nil.
func Get(ctx context.Context, cached, api client.Reader, key client.ObjectKey, obj client.Object) error {
	err := cached.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && api != nil {
		return api.Get(ctx, key, obj)
	}
	return err
}
