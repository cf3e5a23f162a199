package catalog

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Default fills the schema's defaults into an app (its unstructured content), in place.
func (k *Kind) Default(app map[string]any) {
	structuraldefaulting.Default(app, k.structural)
}

// Validate checks an app's spec (its unstructured content) against the definition: unknown
// fields, the schema and its CEL rules (x-kubernetes-validations; transition rules see old, the
// app before an update, nil on create), the forbidden paths and the platform's own fields. Every
// error names the offending field (spec.storage.size). The status is not validated: it is never
// stored.
func (k *Kind) Validate(app, old map[string]any) field.ErrorList {
	var errs field.ErrorList
	spec, _ := app["spec"].(map[string]any)
	probe := map[string]any{"spec": runtime.DeepCopyJSONValue(app["spec"])}
	unknown := pruning.PruneWithOptions(probe, k.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range unknown {
		errs = append(errs, field.Invalid(field.NewPath(p), nil, "unknown field: the definition's schema does not declare it"))
	}
	if _, ok := app["spec"]; ok && spec == nil && app["spec"] != nil {
		return append(errs, field.Invalid(field.NewPath("spec"), app["spec"], "must be an object"))
	}
	if len(errs) > 0 {
		return errs
	}
	name, _, _ := unstructured.NestedString(app, "metadata", "name")
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}, k.validator)...)
	if k.rules != nil {
		var oldObj any
		if old != nil {
			oldObj = map[string]any{"spec": old["spec"]}
		}
		celErrs, _ := k.rules.Validate(context.Background(), nil, k.structural, map[string]any{"spec": spec}, oldObj, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	specPath := field.NewPath("spec")
	if _, ok := spec[catalogv1.PlatformValuesKey]; ok {
		errs = append(errs, field.Forbidden(specPath.Child(catalogv1.PlatformValuesKey), "is set by the platform"))
	}
	for i, pattern := range k.forbidden {
		for _, p := range match(spec, pattern, specPath) {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("may not be set: the catalog forbids %s", k.Definition.Spec.ForbiddenPaths[i])))
		}
	}
	if v, ok := spec[VolumePolicyField]; ok && !k.Definition.Spec.Persistence.AllowOverride && v != string(k.DefaultVolumePolicy()) {
		errs = append(errs, field.Forbidden(specPath.Child(VolumePolicyField),
			fmt.Sprintf("this app's definition keeps volumePolicy at %s", k.DefaultVolumePolicy())))
	}
	return errs
}

// DefaultVolumePolicy is the volume policy of apps that do not set one.
func (k *Kind) DefaultVolumePolicy() catalogv1.VolumePolicy {
	if p := k.Definition.Spec.Persistence.DefaultVolumePolicy; p != "" {
		return p
	}
	return catalogv1.VolumePolicyRetain
}

// match returns the paths in v that a forbidden pattern selects: keys match literally, * matches
// any one key or list index, ** any number of them (including none).
func match(v any, pattern []string, at *field.Path) []*field.Path {
	if len(pattern) == 0 {
		return []*field.Path{at}
	}
	head, rest := pattern[0], pattern[1:]
	var out []*field.Path
	if head == "**" {
		out = append(out, match(v, rest, at)...)
		rest = pattern // ** may swallow this level and more
	}
	switch x := v.(type) {
	case map[string]any:
		for _, key := range slices.Sorted(maps.Keys(x)) {
			if head == "*" || head == "**" || head == key {
				out = append(out, match(x[key], rest, at.Child(key))...)
			}
		}
	case []any:
		for i, item := range x {
			if head == "*" || head == "**" || head == strconv.Itoa(i) {
				out = append(out, match(item, rest, at.Index(i))...)
			}
		}
	}
	return out
}
