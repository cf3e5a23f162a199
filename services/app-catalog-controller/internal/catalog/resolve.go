package catalog

import (
	"fmt"
	"slices"
	"strings"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Rejection is why a definition is not served.
type Rejection struct {
	Reason  string
	Message string
}

// Catalog is the outcome of resolving all definitions: the kinds served (by plural) and the
// definitions that are not (by definition name).
type Catalog struct {
	Kinds    map[string]*Kind
	Rejected map[string]Rejection
}

// Resolve compiles every definition and decides which are served. Definitions that claim the
// same kind, plural, singular or short name conflict: the oldest one is served (among those
// created in the same second, the one already served, then the first by name) and the others are
// rejected with KindConflict, never silently overwritten.
// A definition being deleted still claims its names: its apps are served until they are gone.
// compile is Compile, or a cache of it.
func Resolve(defs []*catalogv1.ApplicationDefinition, compile func(*catalogv1.ApplicationDefinition) (*Kind, error)) Catalog {
	defs = slices.Clone(defs)
	slices.SortFunc(defs, func(a, b *catalogv1.ApplicationDefinition) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if sa, sb := catalogv1.Served(a), catalogv1.Served(b); sa != sb { // creation times are whole seconds
			if sa {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := Catalog{Kinds: map[string]*Kind{}, Rejected: map[string]Rejection{}}
	claimed := map[string]string{} // lower-cased name → definition claiming it
	for _, def := range defs {
		k, err := compile(def)
		if err != nil {
			out.Rejected[def.Name] = Rejection{Reason: catalogv1.InvalidSchemaReason, Message: err.Error()}
			continue
		}
		names := k.Names()
		var clash []string
		for _, n := range names {
			if owner, ok := claimed[n]; ok {
				clash = append(clash, fmt.Sprintf("%q (defined by %s)", n, owner))
			}
		}
		if len(clash) > 0 {
			out.Rejected[def.Name] = Rejection{Reason: catalogv1.KindConflictReason,
				Message: "names already served: " + strings.Join(clash, ", ")}
			continue
		}
		for _, n := range names {
			claimed[n] = def.Name
		}
		out.Kinds[k.GVR.Resource] = k
	}
	return out
}

// Names are the names by which kubectl finds the kind, lower-cased.
func (k *Kind) Names() []string {
	n := k.Definition.Spec.Names
	names := []string{strings.ToLower(n.Kind), n.Plural, k.Singular}
	names = append(names, n.ShortNames...)
	slices.Sort(names)
	return slices.Compact(names)
}
