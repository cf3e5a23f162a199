package tenants

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
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
