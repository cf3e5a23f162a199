package ssa

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Extractor returns the fields of obj owned by fieldManager, as an apply configuration; the
// client-go applyconfigurations packages provide one per type (corev1ac.ExtractNamespace, …).
type Extractor[T client.Object, AC runtime.ApplyConfiguration] func(obj T, fieldManager string) (AC, error)

// Apply server-side applies desired unless the object at key already carries exactly the fields
// desired sets, as owned by owner. current is an empty object of the right type, filled from the
// reader (normally the cache). It reports whether a request was sent.
func Apply[T client.Object, AC runtime.ApplyConfiguration](ctx context.Context, c client.Client, r client.Reader,
	key types.NamespacedName, current T, desired AC, extract Extractor[T, AC], owner string) (bool, error) {
	err := r.Get(ctx, key, current)
	switch {
	case err == nil:
		have, err := extract(current, owner)
		if err != nil {
			return false, fmt.Errorf("extracting fields of %s owned by %s: %w", key, owner, err)
		}
		if same, err := sameJSON(have, desired); err != nil || same {
			return false, err
		}
	case !apierrors.IsNotFound(err):
		return false, err
	}
	if err := c.Apply(ctx, desired, client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying %s: %w", key, err)
	}
	return true, nil
}

// sameJSON compares two values of the same type by their JSON form, the form the API server
// stores: the encoder orders struct fields and map keys, so equal values give equal bytes.
func sameJSON(a, b any) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ja, jb), nil
}
