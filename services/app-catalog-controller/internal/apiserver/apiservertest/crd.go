package apiservertest

import (
	"encoding/json"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CRD is a namespaced CustomResourceDefinition serving kind at group/v1, whose spec has the given
// OpenAPI v3 schema (JSON) and defaults to {} as an app's does: the reference an app kind of the
// same schema is compared with.
func CRD(group, kind, plural, specSchema string) (*apiextensionsv1.CustomResourceDefinition, error) {
	spec := apiextensionsv1.JSONSchemaProps{}
	if err := json.Unmarshal([]byte(specSchema), &spec); err != nil {
		return nil, err
	}
	if spec.Default == nil {
		spec.Default = &apiextensionsv1.JSON{Raw: []byte("{}")}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, Plural: plural},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec}}}}},
		},
	}, nil
}
