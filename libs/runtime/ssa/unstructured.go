package ssa

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationApplied holds a hash of the object a controller last applied with ApplyUnstructured.
// Together with the live object holding every desired value, it tells a converged object from one
// that needs a request: the hash catches a field the controller stopped setting (which apply
// removes), the comparison catches anyone else changing a field the controller sets.
const AnnotationApplied = "flotilla.dev/applied"

// ApplyUnstructured server-side applies desired under owner with ForceOwnership, unless live (the
// object of desired's name as read, normally from the cache; nil when there is none) already holds
// it. It is Apply for kinds without client-go apply configurations (other projects' CRDs). It
// reports whether a request was sent.
func ApplyUnstructured(ctx context.Context, c client.Client, desired, live *unstructured.Unstructured, owner string) (bool, error) {
	desired = desired.DeepCopy()
	b, err := json.Marshal(desired.Object) // map keys are sorted: equal objects give equal bytes
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(b)
	ann := desired.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationApplied] = hex.EncodeToString(sum[:])[:16]
	desired.SetAnnotations(ann)
	if live != nil && live.GetAnnotations()[AnnotationApplied] == ann[AnnotationApplied] && ContainsObject(live.Object, desired.Object) {
		return false, nil
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying %s %s/%s: %w", desired.GetKind(), desired.GetNamespace(), desired.GetName(), err)
	}
	return true, nil
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
