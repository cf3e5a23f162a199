// Package widget is a kind with kstatus conditions, as every Flotilla kind has, for the tests of
// this module against a real API server.
package widget

import (
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Widget is cluster-scoped, with a status subresource.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              map[string]string `json:"spec,omitempty"`
	Status            Status            `json:"status,omitempty"`
}

// Status is a Widget's status.
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func (w *Widget) GetConditions() []metav1.Condition  { return w.Status.Conditions }
func (w *Widget) SetConditions(c []metav1.Condition) { w.Status.Conditions = c }
func (w *Widget) GetObservedGeneration() int64       { return w.Status.ObservedGeneration }
func (w *Widget) SetObservedGeneration(g int64)      { w.Status.ObservedGeneration = g }
func (w *Widget) DeepCopyObject() runtime.Object {
	c := *w
	c.ObjectMeta = *w.ObjectMeta.DeepCopy()
	c.Status.Conditions = append([]metav1.Condition(nil), w.Status.Conditions...)
	return &c
}
func (l *WidgetList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]Widget(nil), l.Items...)
	return &c
}

// GroupVersion is the Widget's API group and version.
var GroupVersion = schema.GroupVersion{Group: "test.flotilla.dev", Version: "v1"}

// Scheme returns a scheme that knows Widgets.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return s
}

// CRDDir writes the Widget's CRD into a new directory under dir, for testenv.Options.CRDDirs.
func CRDDir(dir string) (string, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + GroupVersion.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: GroupVersion.Group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: GroupVersion.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	raw, err := yaml.Marshal(crd)
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "widget-crd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "crd.yaml"), raw, 0o644)
}
