package testenv

import (
	"context"
	"fmt"
	"reflect"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Lagging returns a client of cfg that answers a Get of stale's object with stale, its
// resourceVersion one less than stale's own: what a cache that has not caught up with the last
// write would hold. Everything else goes to the API server. For tests of what a reconcile does
// with an old copy; stale is typically the live object with its status turned back.
func Lagging(cfg *rest.Config, scheme *runtime.Scheme, stale client.Object) (client.Client, error) {
	gvk, err := apiutil.GVKForObject(stale, scheme)
	if err != nil {
		return nil, err
	}
	rv, err := strconv.ParseInt(stale.GetResourceVersion(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("the stale copy's resourceVersion: %w", err)
	}
	old := stale.DeepCopyObject().(client.Object)
	old.SetResourceVersion(strconv.FormatInt(rv-1, 10))
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if k, err := apiutil.GVKForObject(obj, scheme); err == nil && k == gvk && key == client.ObjectKeyFromObject(old) &&
				reflect.TypeOf(obj) == reflect.TypeOf(old) {
				reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(old.DeepCopyObject()).Elem())
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}), nil
}
