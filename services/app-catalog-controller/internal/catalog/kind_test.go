package catalog

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

func definition(schema string, forbidden ...string) *catalogv1.ApplicationDefinition {
	return &catalogv1.ApplicationDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "postgreses"},
		Spec: catalogv1.ApplicationDefinitionSpec{
			Names:          catalogv1.Names{Kind: "Postgres", Plural: "postgreses", ShortNames: []string{"pg"}},
			Schema:         apiextensionsv1.JSON{Raw: []byte(schema)},
			ForbiddenPaths: forbidden,
			Chart: catalogv1.Chart{Name: "postgres", SourceRef: catalogv1.SourceReference{
				Kind: "HelmRepository", Name: "catalog", Namespace: "flotilla-system"}},
		},
	}
}

const pgSchema = `{"type":"object","properties":{
  "replicas":{"type":"integer","minimum":1,"maximum":5,"default":2},
  "size":{"type":"string","default":"1Gi","pattern":"^[0-9]+Gi$"},
  "parameters":{"type":"object","additionalProperties":{"type":"string"}},
  "extra":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}`

func TestCompileDefaultsAndValidates(t *testing.T) {
	k, err := Compile(definition(pgSchema, "**.image", "parameters.shared_preload_libraries"))
	if err != nil {
		t.Fatal(err)
	}
	if k.ReleasePrefix != "postgres-" || k.GVR.Resource != "postgreses" {
		t.Fatalf("names: %+v", k)
	}
	app := map[string]any{"spec": map[string]any{}}
	k.Default(app)
	spec := app["spec"].(map[string]any)
	if spec["replicas"] != int64(2) || spec["size"] != "1Gi" {
		t.Fatalf("defaults not applied: %v", spec)
	}
	if errs := k.Validate(app, nil); len(errs) != 0 {
		t.Fatalf("valid app rejected: %v", errs)
	}

	cases := map[string]struct {
		spec string
		want string
	}{
		"unknown field":  {`{"replicas":1,"color":"red"}`, "spec.color: Invalid value"},
		"out of range":   {`{"replicas":9}`, "spec.replicas: Invalid value"},
		"pattern":        {`{"size":"1TB"}`, "spec.size: Invalid value"},
		"forbidden deep": {`{"extra":{"containers":[{"image":"evil"}]}}`, "spec.extra.containers[0].image: Forbidden"},
		"forbidden key":  {`{"parameters":{"shared_preload_libraries":"x"}}`, "spec.parameters.shared_preload_libraries: Forbidden"},
		"platform key":   {`{"flotilla":{}}`, "spec.flotilla"},
		"volume policy":  {`{"volumePolicy":"Delete"}`, "spec.volumePolicy: Forbidden"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			app := map[string]any{"spec": mustJSON(t, c.spec)}
			errs := k.Validate(app, nil)
			if !strings.Contains(errs.ToAggregate().Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", errs, c.want)
			}
		})
	}
}

func TestCompileRejectsBadDefinitions(t *testing.T) {
	cases := map[string]struct {
		def  *catalogv1.ApplicationDefinition
		want string
	}{
		"not structural": {definition(`{"type":"object","properties":{"a":{}}}`), "spec.schema.properties[a].type: Required value"},
		"not an object":  {definition(`{"type":"string"}`), "spec.schema.type"},
		"reserved":       {definition(`{"type":"object","properties":{"volumePolicy":{"type":"string"}}}`), "spec.schema.properties[volumePolicy]: Forbidden"},
		"bad default":    {definition(`{"type":"object","properties":{"a":{"type":"integer","default":"x"}}}`), "spec.schema.properties[a].default"},
		"bad forbidden":  {definition(pgSchema, "a..b"), "spec.forbiddenPaths[0]"},
		"not json":       {definition(`[`), "spec.schema"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Compile(c.def)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestCELRules(t *testing.T) {
	k, err := Compile(definition(`{"type":"object",
	  "x-kubernetes-validations":[{"rule":"!has(self.min) || !has(self.max) || self.min <= self.max","message":"min must not exceed max"}],
	  "properties":{
	    "min":{"type":"integer"},"max":{"type":"integer"},
	    "disk":{"type":"string","x-kubernetes-validations":[{"rule":"self == oldSelf","message":"disk is fixed once created"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	app := func(spec string) map[string]any { return map[string]any{"spec": mustJSON(t, spec)} }
	if errs := k.Validate(app(`{"min":1,"max":2,"disk":"a"}`), nil); len(errs) != 0 {
		t.Fatalf("valid app rejected: %v", errs)
	}
	if errs := k.Validate(app(`{"min":3,"max":2}`), nil); !strings.Contains(errs.ToAggregate().Error(), "spec: Invalid value: min must not exceed max") {
		t.Fatalf("got %v", errs)
	}
	if errs := k.Validate(app(`{"disk":"b"}`), app(`{"disk":"a"}`)); !strings.Contains(errs.ToAggregate().Error(), "spec.disk: Invalid value: \"b\": disk is fixed once created") {
		t.Fatalf("transition rule: got %v", errs)
	}
}

// A definition may restrict app names beyond DNS labels; the refusal names metadata.name, and a
// pattern that is no regular expression is the definition's error.
func TestAppNamePattern(t *testing.T) {
	def := definition(pgSchema)
	def.Spec.Names.AppNamePattern = "^[a-z][a-z0-9]*$"
	k, err := Compile(def)
	if err != nil {
		t.Fatal(err)
	}
	app := func(name string) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{}}
	}
	if errs := k.Validate(app("team1"), nil); len(errs) != 0 {
		t.Fatalf("valid name rejected: %v", errs)
	}
	if errs := k.Validate(app("my-team"), nil); !strings.Contains(errs.ToAggregate().Error(), `metadata.name: Invalid value: "my-team"`) {
		t.Fatalf("got %v", errs)
	}
	def.Spec.Names.AppNamePattern = "^[a-z"
	if _, err := Compile(def); err == nil || !strings.Contains(err.Error(), "spec.names.appNamePattern") {
		t.Fatalf("bad pattern: got %v", err)
	}
}
