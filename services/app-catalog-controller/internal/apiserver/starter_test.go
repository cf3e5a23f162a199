package apiserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// Every starter definition compiles; an app with no values gets the schema's defaults, which are
// the chart's own defaults (so a chart never runs on values the catalog did not vouch for); and
// an attempt to set an image, the first thing an attacker tries, is refused with a field error.
func TestStarterDefinitions(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "deploy", "catalog", "*", "definition.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no starter definitions: %v", err)
	}
	for _, def := range dirs {
		app := filepath.Base(filepath.Dir(def))
		t.Run(app, func(t *testing.T) {
			k := starterKind(t, app)
			s := &appStorage{kind: k}
			u := newApp(k, map[string]any{})
			if err := s.admit(u, nil); err != nil {
				t.Fatalf("an app with the defaults is rejected: %v", err)
			}
			raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "catalog", app, "chart", "values.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var values map[string]any
			if err := yaml.Unmarshal(raw, &values); err != nil {
				t.Fatal(err)
			}
			for key, v := range u.Object["spec"].(map[string]any) {
				if !within(normalize(t, v), normalize(t, values[key])) {
					t.Errorf("default of %s is %v in the definition but %v in the chart", key, v, values[key])
				}
			}
			if k.Definition.Spec.Names.AppNamePattern != "" {
				dashed := newApp(k, map[string]any{})
				dashed.SetName("my-app")
				if err := s.admit(dashed, nil); err == nil || !strings.Contains(err.Error(), "metadata.name") {
					t.Errorf("a name outside the definition's pattern is accepted or not named: %v", err)
				}
			}
			err = s.admit(newApp(k, map[string]any{"image": "attacker/miner"}), nil)
			if err == nil || !strings.Contains(err.Error(), "spec.image") {
				t.Fatalf("spec.image accepted or not named: %v", err)
			}
		})
	}
}

// An app's identity is the ServiceAccount named like its release: a definition with no release
// prefix may not take an app named default, whose identity would be the namespace's own default
// ServiceAccount (which the app-identity policy lets change nothing).
func TestReleaseNamedDefaultIsRefused(t *testing.T) {
	k := starterKind(t, "redis")
	named := newApp(k, map[string]any{})
	named.SetName("default")
	if err := (&appStorage{kind: k}).admit(named, nil); err != nil {
		t.Fatalf("with its prefix (%q), an app named default is refused: %v", k.ReleasePrefix, err)
	}
	k.ReleasePrefix = ""
	named = newApp(k, map[string]any{})
	named.SetName("default")
	err := (&appStorage{kind: k}).admit(named, nil)
	if err == nil || !strings.Contains(err.Error(), `metadata.name: Invalid value: "default"`) {
		t.Fatalf("an app whose release would be named default: %v", err)
	}
}

// within: every value set in def is set to the same in chart (chart may set more).
func within(def, chart any) bool {
	d, ok := def.(map[string]any)
	if !ok {
		return equality.Semantic.DeepEqual(def, chart)
	}
	c, ok := chart.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range d {
		if !within(v, c[k]) {
			return false
		}
	}
	return true
}

func newApp(k *catalog.Kind, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(k.GVK)
	u.SetNamespace("tenant-acme")
	u.SetName("app")
	return u
}
