package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	celvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/utils/ptr"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Reserved properties of an app's spec, which the platform defines beside the definition's values.
const (
	DeletionProtectionField = "deletionProtection"
	VolumePolicyField       = "volumePolicy"
)

// Kind is a compiled ApplicationDefinition: everything needed to serve, default and validate its
// apps. It is immutable; a changed definition compiles into a new Kind.
type Kind struct {
	Definition *catalogv1.ApplicationDefinition
	GVK        schema.GroupVersionKind
	GVR        schema.GroupVersionResource
	Singular   string
	// ReleasePrefix prefixes each app's Helm release (and HelmRelease) name.
	ReleasePrefix string

	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	rules      *celvalidation.Validator // the schema's x-kubernetes-validations; nil without any
	forbidden  [][]string

	Table         rest.TableConvertor
	OpenAPI       *spec3.OpenAPI
	TypeConverter managedfields.TypeConverter
}

// Compile validates a definition and compiles it. Its error is a field.ErrorList naming the
// definition's fields (spec.schema…, spec.names…) when the definition is invalid.
func Compile(def *catalogv1.ApplicationDefinition) (*Kind, error) {
	crd, errs := toCRD(def)
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		return nil, err
	}
	if errs := crdErrors(crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal)); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	s, err := structuralschema.NewStructural(internal.Spec.Validation.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, err
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.Spec.Validation.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	table, err := tableconvertor.New(crd.Spec.Versions[0].AdditionalPrinterColumns)
	if err != nil {
		return nil, err
	}
	openapi, err := builder.BuildOpenAPIV3(crd, catalogv1.AppsGroupVersion.Version, builder.Options{})
	if err != nil {
		return nil, fmt.Errorf("building OpenAPI: %w", err)
	}
	models, err := builder.BuildOpenAPIV3(crd, catalogv1.AppsGroupVersion.Version, builder.Options{StripValueValidation: true, StripNullable: true})
	if err != nil {
		return nil, fmt.Errorf("building OpenAPI models: %w", err)
	}
	tc, err := managedfields.NewTypeConverter(models.Components.Schemas, false)
	if err != nil {
		return nil, fmt.Errorf("building the apply type converter: %w", err)
	}
	k := &Kind{
		rules:      celvalidation.NewValidator(s, true, celconfig.PerCallLimit),
		Definition: def,
		GVK:        catalogv1.AppsGroupVersion.WithKind(def.Spec.Names.Kind),
		GVR:        catalogv1.AppsGroupVersion.WithResource(def.Spec.Names.Plural),
		Singular:   crd.Spec.Names.Singular,
		structural: s, validator: validator,
		Table: table, OpenAPI: openapi, TypeConverter: tc,
	}
	k.ReleasePrefix = k.Singular + "-"
	if p := def.Spec.Release.Prefix; p != nil {
		k.ReleasePrefix = *p
	}
	for _, p := range def.Spec.ForbiddenPaths {
		k.forbidden = append(k.forbidden, strings.Split(p, "."))
	}
	return k, nil
}

// CRDName is the name the in-memory CRD of a definition would have.
func CRDName(def *catalogv1.ApplicationDefinition) string {
	return def.Spec.Names.Plural + "." + catalogv1.AppsGroupVersion.Group
}

// toCRD builds the CRD equivalent of a definition: the app's schema is spec (the values, plus the
// reserved fields) and status (conditions, version, message, outputs).
func toCRD(def *catalogv1.ApplicationDefinition) (*apiextensionsv1.CustomResourceDefinition, field.ErrorList) {
	schemaPath := field.NewPath("spec", "schema")
	var values apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal(def.Spec.Schema.Raw, &values); err != nil {
		return nil, field.ErrorList{field.Invalid(schemaPath, "", fmt.Sprintf("not an OpenAPI v3 schema: %v", err))}
	}
	var errs field.ErrorList
	if values.Type != "object" {
		errs = append(errs, field.Invalid(schemaPath.Child("type"), values.Type, "must be object"))
	}
	for _, reserved := range []string{DeletionProtectionField, VolumePolicyField, catalogv1.PlatformValuesKey} {
		if _, ok := values.Properties[reserved]; ok {
			errs = append(errs, field.Forbidden(schemaPath.Child("properties").Key(reserved), "is reserved for the platform"))
		}
	}
	for i, p := range def.Spec.ForbiddenPaths {
		if p == "" || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			errs = append(errs, field.Invalid(field.NewPath("spec", "forbiddenPaths").Index(i), p, "must be dot-separated keys, * for any one key"))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if values.Properties == nil {
		values.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
	}
	values.Properties[DeletionProtectionField] = apiextensionsv1.JSONSchemaProps{
		Type:        "boolean",
		Description: "DeletionProtection blocks deleting the app until it is set to false.",
	}
	volumePolicy := apiextensionsv1.JSONSchemaProps{
		Type:        "string",
		Description: "VolumePolicy: what happens to the app's persistent volume claims when it is deleted (Delete or Retain).",
		Enum:        []apiextensionsv1.JSON{{Raw: []byte(`"Delete"`)}, {Raw: []byte(`"Retain"`)}},
	}
	if !def.Spec.Persistence.AllowOverride {
		volumePolicy.Description += " This app's definition does not allow changing it."
	}
	values.Properties[VolumePolicyField] = volumePolicy
	if values.Default == nil {
		// An app always has values: without a spec (a PUT without one, spec: null), the
		// schema's defaults apply, as for a CRD whose spec defaults to {}.
		values.Default = &apiextensionsv1.JSON{Raw: []byte("{}")}
	}

	str := func(desc string) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "string", Description: desc}
	}
	status := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": {Type: "integer", Format: "int64"},
			"conditions": {
				Type: "array", XListType: ptr.To("map"), XListMapKeys: []string{"type"},
				Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Required: []string{"type", "status"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"type": str(""), "status": str(""), "reason": str(""), "message": str(""),
						"lastTransitionTime": {Type: "string", Format: "date-time"},
						"observedGeneration": {Type: "integer", Format: "int64"},
					},
				}},
			},
			"version":     str("Version of the chart installed."),
			"message":     str("Message explains the Ready condition."),
			"releaseName": str("ReleaseName is the app's Helm release."),
			"outputs": {
				Type:        "array",
				Description: "Outputs are the Secrets and Services of the app the tenant may use.",
				Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"kind": str(""), "name": str("")},
				}},
			},
		},
	}
	title := def.Spec.Display.Title
	if title == "" {
		title = def.Spec.Names.Kind
	}
	singular := def.Spec.Names.Singular
	if singular == "" {
		singular = strings.ToLower(def.Spec.Names.Kind)
	}
	categories := append([]string{"flotilla", "apps"}, def.Spec.Names.Categories...)
	metadata := apiextensionsv1.JSONSchemaProps{Type: "object"}
	if p := def.Spec.Names.AppNamePattern; p != "" {
		metadata.Properties = map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string", Pattern: p}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: CRDName(def)},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: catalogv1.AppsGroupVersion.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: def.Spec.Names.Kind, ListKind: def.Spec.Names.Kind + "List",
				Plural: def.Spec.Names.Plural, Singular: singular,
				ShortNames: def.Spec.Names.ShortNames, Categories: categories,
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: catalogv1.AppsGroupVersion.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:        "object",
					Description: strings.TrimSpace(title + ": " + def.Spec.Display.Description),
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": metadata,
						"spec": values, "status": status,
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
					{Name: "Version", Type: "string", JSONPath: ".status.version"},
					{Name: "Status", Type: "string", JSONPath: ".status.message", Priority: 1},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{catalogv1.AppsGroupVersion.Version}},
	}, nil
}

// crdErrors maps the CRD validation's field paths back onto the definition's.
func crdErrors(in field.ErrorList) field.ErrorList {
	var out field.ErrorList
	for _, e := range in {
		if e.Field == "metadata.name" {
			continue // derived from spec.names.plural, checked by the CRD schema's CEL rule
		}
		e := *e
		for _, root := range []string{"spec.validation.openAPIV3Schema.properties", "spec.versions[0].schema.openAPIV3Schema.properties"} {
			if rest, ok := strings.CutPrefix(e.Field, root+"[spec]"); ok {
				e.Field = "spec.schema" + rest
			}
			if strings.HasPrefix(e.Field, root+"[metadata]") {
				e.Field = "spec.names.appNamePattern"
			}
		}
		out = append(out, &e)
	}
	return out
}
