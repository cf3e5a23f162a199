// Package intern shares, among the objects of an informer cache, what many of them hold equal: a
// controller's caches hold thousands of objects it wrote alike, each with its own copy of the
// same label map and the same managedFields field set.
package intern

import (
	"bytes"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// limit bounds both the values seen once, of which a second sighting makes a shared one, and the
// shared values: values unique to one object (a namespace's own labels) are mostly forgotten, those
// many objects hold are kept; and a pool that never forgets stays small.
const limit = 4096

// Transform is a cache transform (cache.Options.DefaultTransform, after any other) that makes
// objects share their label and annotation maps, their managedFields' field sets, and their
// namespace and managers' names with the other objects that hold them equal. The cache's objects
// are never changed in place (controller-runtime's reads return deep copies), so that sharing is
// safe; it must not be used with cache.Options.UnsafeDisableDeepCopy.
func Transform() toolscache.TransformFunc {
	p := &pool{seed: maphash.MakeSeed()}
	return func(obj any) (any, error) {
		o, ok := obj.(metav1.Object)
		if !ok { // a tombstone (DeletedFinalStateUnknown) keeps its object as it was
			return obj, nil
		}
		o.SetNamespace(unique.Make(o.GetNamespace()).Value())
		if l := o.GetLabels(); len(l) > 0 {
			o.SetLabels(p.labels(l))
		}
		if a := o.GetAnnotations(); len(a) > 0 {
			o.SetAnnotations(p.labels(a))
		}
		mf := o.GetManagedFields()
		for i := range mf {
			e := &mf[i]
			e.Manager, e.APIVersion = unique.Make(e.Manager).Value(), unique.Make(e.APIVersion).Value()
			if e.FieldsV1 != nil {
				e.FieldsV1 = p.fields(e.FieldsV1)
			}
		}
		return obj, nil
	}
}

// pool holds the shared values, by a hash of their content (checked equal on use: values whose
// hashes collide are not shared).
type pool struct {
	mu         sync.Mutex
	seed       maphash.Seed
	maps       map[uint64]map[string]string
	fieldSets  map[uint64]*metav1.FieldsV1
	seenMaps   map[uint64]struct{}
	seenFields map[uint64]struct{}
}

// labels is m's shared equal, or m.
func (p *pool) labels(m map[string]string) map[string]string {
	var h maphash.Hash
	p.mu.Lock()
	defer p.mu.Unlock()
	h.SetSeed(p.seed)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(m[k])
		h.WriteByte(0)
	}
	return share(&p.maps, &p.seenMaps, h.Sum64(), m, maps.Equal)
}

// fields is f's shared equal, or f.
func (p *pool) fields(f *metav1.FieldsV1) *metav1.FieldsV1 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return share(&p.fieldSets, &p.seenFields, maphash.Bytes(p.seed, f.Raw), f,
		func(a, b *metav1.FieldsV1) bool { return bytes.Equal(a.Raw, b.Raw) })
}

// share returns the value shared under key if equal to v, making v the shared one when key is
// seen a second time (while fewer than limit are shared).
func share[T any](shared *map[uint64]T, seen *map[uint64]struct{}, key uint64, v T, equal func(a, b T) bool) T {
	if s, ok := (*shared)[key]; ok {
		if equal(s, v) {
			return s
		}
		return v
	}
	if len(*shared) >= limit {
		return v
	}
	if _, ok := (*seen)[key]; !ok {
		if len(*seen) >= limit {
			*seen = nil
		}
		if *seen == nil {
			*seen = map[uint64]struct{}{}
		}
		(*seen)[key] = struct{}{}
		return v
	}
	delete(*seen, key)
	if *shared == nil {
		*shared = map[uint64]T{}
	}
	(*shared)[key] = v
	return v
}
