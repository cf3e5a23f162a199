package metrics

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// Widget is a kind with kstatus conditions, as every Flotilla kind has.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              map[string]string `json:"spec,omitempty"`
	Status            struct {
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	} `json:"status,omitempty"`
}

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
	c.Status.Conditions = append([]metav1.Condition(nil), w.Status.Conditions...)
	return &c
}
func (l *WidgetList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]Widget(nil), l.Items...)
	return &c
}

var gv = schema.GroupVersion{Group: "test.flotilla.dev", Version: "v1"}

// The collector counts what the API holds, by condition and status, and the objects whose status
// lags their spec.
func TestStatusCollector(t *testing.T) {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(gv, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, gv)
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.flotilla.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gv.Group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	dir := t.TempDir()
	raw, _ := yaml.Marshal(crd)
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.Options{Scheme: scheme, CRDDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	k8s := env.Client

	// ready: Ready=True, current; failing: Ready=False and Stalled=True; fresh: no status yet (stale).
	for name, conds := range map[string][]metav1.Condition{
		"ready":   {{Type: "Ready", Status: metav1.ConditionTrue}},
		"failing": {{Type: "Ready", Status: metav1.ConditionFalse}, {Type: "Stalled", Status: metav1.ConditionTrue}},
		"fresh":   nil,
	} {
		w := &Widget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: map[string]string{"a": "b"}}
		if err := k8s.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		if conds == nil {
			continue
		}
		for i := range conds {
			conds[i].Reason, conds[i].LastTransitionTime = "Test", metav1.Now()
		}
		w.Status.Conditions, w.Status.ObservedGeneration = conds, w.Generation
		if err := k8s.Status().Update(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	c := &StatusCollector{Reader: k8s, Kinds: []Kind{{Name: "Widget", List: func() client.ObjectList { return &WidgetList{} }}}}
	want := `
# HELP flotilla_objects Objects of a kind by the status of a kstatus condition (Ready, Reconciling, Stalled); Unknown counts objects without it.
# TYPE flotilla_objects gauge
flotilla_objects{condition="Ready",kind="Widget",status="False"} 1
flotilla_objects{condition="Ready",kind="Widget",status="True"} 1
flotilla_objects{condition="Ready",kind="Widget",status="Unknown"} 1
flotilla_objects{condition="Reconciling",kind="Widget",status="False"} 0
flotilla_objects{condition="Reconciling",kind="Widget",status="True"} 0
flotilla_objects{condition="Reconciling",kind="Widget",status="Unknown"} 3
flotilla_objects{condition="Stalled",kind="Widget",status="False"} 0
flotilla_objects{condition="Stalled",kind="Widget",status="True"} 1
flotilla_objects{condition="Stalled",kind="Widget",status="Unknown"} 2
# HELP flotilla_objects_stale Objects of a kind whose status is behind their spec (status.observedGeneration < metadata.generation).
# TYPE flotilla_objects_stale gauge
flotilla_objects_stale{kind="Widget"} 1
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
