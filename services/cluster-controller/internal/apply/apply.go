package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

// AnnotationApplied holds the hash of the object last applied. Together with the live object
// holding every desired value, it tells a converged object from one that needs a request: the hash
// catches a field the controller stopped setting (which apply removes), the comparison catches
// anyone else changing a field the controller sets.
const AnnotationApplied = "cluster.flotilla.dev/applied"

// ErrNotOwned is returned for an object of the desired name that is not controlled by owner: it
// is never changed or adopted.
var ErrNotOwned = errors.New("exists and was not created by this cluster")

// Apply server-side applies desired under fieldOwner with ForceOwnership unless live (what Live
// read for desired; nil when there is none) already holds it. It reports whether a request was sent.
func Apply(ctx context.Context, c client.Client, desired, live *unstructured.Unstructured, fieldOwner string) (bool, error) {
	desired = desired.DeepCopy()
	sum, err := hash(desired)
	if err != nil {
		return false, err
	}
	ann := desired.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationApplied] = sum
	desired.SetAnnotations(ann)
	if live != nil && live.GetAnnotations()[AnnotationApplied] == sum && ContainsObject(live.Object, desired.Object) {
		return false, nil
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying %s %s/%s: %w", desired.GetKind(), desired.GetNamespace(), desired.GetName(), err)
	}
	return true, nil
}

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

func hash(u *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(u.Object) // map keys are sorted: equal objects give equal bytes
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// ContainsObject is Contains for whole objects, where metadata.ownerReferences and
// metadata.finalizers are sets other parties add to (Cluster API owns a MachineDeployment through
// its Cluster too): each wanted item must be held by some live item.
func ContainsObject(have, want map[string]any) bool {
	wm, _ := want["metadata"].(map[string]any)
	hm, _ := have["metadata"].(map[string]any)
	rest := map[string]any{}
	for k, v := range want {
		if k != "metadata" {
			rest[k] = v
		}
	}
	if !Contains(have, rest) {
		return false
	}
	plain := map[string]any{}
	for k, v := range wm {
		switch k {
		case "ownerReferences", "finalizers":
			items, _ := v.([]any)
			haveItems, _ := hm[k].([]any)
			for _, w := range items {
				if !slices.ContainsFunc(haveItems, func(h any) bool { return Contains(h, w) }) {
					return false
				}
			}
		default:
			plain[k] = v
		}
	}
	return Contains(hm, plain)
}

// Contains reports whether have holds every value of want: maps may carry more keys (defaults,
// other owners' fields), lists must have the same length with each item containing want's.
// Numbers compare by value whatever their Go type.
func Contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok || !Contains(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !Contains(h[i], w[i]) {
				return false
			}
		}
		return true
	}
	if hn, ok := number(have); ok {
		wn, ok := number(want)
		return ok && hn == wn
	}
	return reflect.DeepEqual(have, want)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
