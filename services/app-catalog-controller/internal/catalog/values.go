package catalog

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	celvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"

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
	obj := map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}
	var oldObj map[string]any
	if old != nil {
		oldObj = map[string]any{"metadata": map[string]any{"name": name}, "spec": old["spec"]}
	}
	errs = append(errs, k.validateSchema(obj, oldObj)...)
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

// validateSchema makes the checks a CRD's strategy makes (apiextensions-apiserver's
// customResourceStrategy): the OpenAPI schema, embedded resources, list sets and maps, then the CEL
// rules unless an error already makes their cost unknown. An update (old is not nil) ratchets, as
// a CRD's does: a value the schema or a rule refuses passes if the update leaves it as it was (the
// definition may have become stricter since it was written), and list sets and maps are checked
// only if the old object passed them.
func (k *Kind) validateSchema(obj, old map[string]any) field.ErrorList {
	ctx := context.Background()
	var errs field.ErrorList
	var celOpts []celvalidation.Option
	var oldObj any // nil on create, for the CEL rules' transition checks
	if old == nil {
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, k.validator)...)
	} else {
		oldObj = old
		correlated := common.NewCorrelatedObject(obj, old, &model.Structural{Structural: k.structural})
		celOpts = append(celOpts, celvalidation.WithRatcheting(correlated))
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, k.validator, apiservervalidation.WithRatcheting(correlated))...)
	}
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, k.structural, false)...)
	if old == nil || len(structurallisttype.ValidateListSetsAndMaps(nil, k.structural, old)) == 0 {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, k.structural, obj)...)
	}
	if k.rules == nil {
		return errs
	}
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		}
	}
	celErrs, _ := k.rules.Validate(ctx, nil, k.structural, obj, oldObj, celconfig.RuntimeCELCostBudget, celOpts...)
	return append(errs, celErrs...)
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
