package apply

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

// ErrNotOwned is returned for an object of the desired name that is not controlled by owner: it
// is never changed or adopted.
var ErrNotOwned = errors.New("exists and was not created by this cluster")

// Live reads (from r) the live object of desired's name: nil when there is none, ErrNotOwned when
// it is not controlled by the owner desired names. Such an object is never changed or adopted.
func Live(ctx context.Context, r client.Reader, desired *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(desired.GroupVersionKind())
	key := types.NamespacedName{Namespace: desired.GetNamespace(), Name: desired.GetName()}
	switch err := r.Get(ctx, key, live); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case !controlledBySame(live, desired):
		return nil, fmt.Errorf("%s %s: %w", desired.GetKind(), key, ErrNotOwned)
	}
	return live, nil
}

// controlledBySame reports whether live has the owner desired names: its controller reference,
// or, for an object in another namespace than its owner (which no owner reference can cross), the
// owner's UID in the annotation clusterapi.AnnotationOwner.
func controlledBySame(live, desired *unstructured.Unstructured) bool {
	want := ""
	for _, ref := range desired.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			want = string(ref.UID)
		}
	}
	if want == "" {
		uid := desired.GetAnnotations()[clusterapi.AnnotationOwner]
		return uid != "" && live.GetAnnotations()[clusterapi.AnnotationOwner] == uid
	}
	for _, ref := range live.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && string(ref.UID) == want {
			return true
		}
	}
	return false
}
