package apiserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

func starterKind(t testing.TB, app string) *catalog.Kind {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "catalog", app, "definition.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	def := &catalogv1.ApplicationDefinition{}
	if err := yaml.UnmarshalStrict(raw, def); err != nil {
		t.Fatal(err)
	}
	k, err := catalog.Compile(def)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// FuzzAdmit sends random JSON as the spec of a Postgres app through the write path's admission
// (defaulting and validation). Whatever the input: no panic; a rejection is a 422 whose every
// cause names a field; an accepted app becomes a HelmRelease whose app reads back unchanged, with
// the platform's values present and not the customer's attempt at them.
func FuzzAdmit(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"replicas":3}`, `{"replicas":"3"}`, `{"replicas":0}`, `{"storage":{"size":"1TB"}}`,
		`{"parameters":{"shared_preload_libraries":"x"}}`, `{"imageName":"evil"}`, `{"flotilla":{"tenant":"x"}}`, `{"flotilla":{"registry":"evil.example"}}`,
		`{"volumePolicy":"Delete","deletionProtection":true}`, `{"parameters":{"a":1}}`, `[]`, `null`, `"x"`,
		`{"storage":null}`, `{"resources":{"cpu":"100m","memory":"1Gi"}}`, `{"version":"12"}`,
	} {
		f.Add(seed)
	}
	k := starterKind(f, "postgres")
	s := &appStorage{kind: k}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-acme", Labels: map[string]string{"tenancy.flotilla.dev/tenant": "acme"}}}
	f.Fuzz(func(t *testing.T, spec string) {
		var v any
		if utiljson.Unmarshal([]byte(spec), &v) != nil { // as the apiserver's decoder: integers stay int64
			return
		}
		app := &unstructured.Unstructured{Object: map[string]any{"spec": v}}
		app.SetGroupVersionKind(k.GVK)
		app.SetNamespace("tenant-acme")
		app.SetName("db")
		err := s.admit(app, nil)
		if err != nil {
			status, ok := err.(apierrors.APIStatus)
			if !ok || !apierrors.IsInvalid(err) || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 {
				t.Fatalf("rejection is not a 422 with causes: %v", err)
			}
			for _, c := range status.Status().Details.Causes {
				if c.Field == "" || c.Message == "" {
					t.Fatalf("cause without field or message: %+v", c)
				}
			}
			return
		}
		hr := &helmv2.HelmRelease{}
		if err := toHelmRelease(k, app, ns, "mirror.example/flotilla", hr); err != nil {
			t.Fatal(err)
		}
		var values map[string]any
		if err := json.Unmarshal(hr.Spec.Values.Raw, &values); err != nil {
			t.Fatal(err)
		}
		if p, _ := values[catalogv1.PlatformValuesKey].(map[string]any); p["tenant"] != "acme" || p["registry"] != "mirror.example/flotilla" {
			t.Fatalf("platform values missing or overridden: %v", values[catalogv1.PlatformValuesKey])
		}
		hr.Labels[catalogv1.LabelAppName] = "db"
		back, err := toApp(k, hr)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(normalize(t, back.Object["spec"]), normalize(t, app.Object["spec"])) {
			t.Fatalf("spec does not read back:\n got %v\nwant %v", back.Object["spec"], app.Object["spec"])
		}
	})
}

// normalize round-trips through JSON, so int64 and float64 of the same number compare equal.
func normalize(t *testing.T, v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
