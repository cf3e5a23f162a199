// Package tenants tells the net-controller's reconcilers which namespaces are tenants': those the
// tenant-controller labels tenancy.flotilla.dev/tenant, while they live.
package tenants

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// Namespace returns the namespace's metadata if it is a live tenant namespace, else nil.
func Namespace(ctx context.Context, c client.Reader, name string) (*metav1.PartialObjectMetadata, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if ns.Labels[tenancyv1.LabelTenant] == "" || !ns.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return ns, nil
}
