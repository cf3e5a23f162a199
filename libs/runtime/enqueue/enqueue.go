// Package enqueue holds the event handlers Flotilla's controllers share.
package enqueue

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// All enqueues every object of list type L that c (the manager's cache) holds, whatever changed:
// for objects decided among all of them (pools that must not overlap), or that all depend on the
// object that changed. All[v1alpha1.SubnetPoolList](r.Client).
func All[L any, PL interface {
	*L
	client.ObjectList
}](c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := PL(new(L))
		if err := c.List(ctx, list); err != nil {
			return nil
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(items))
		for _, item := range items {
			if o, ok := item.(client.Object); ok {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
			}
		}
		return reqs
	})
}
