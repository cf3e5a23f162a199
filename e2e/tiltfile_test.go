package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
	"sigs.k8s.io/yaml"
)

// The Tiltfile is executed as Starlark with Tilt's built-ins recorded instead of performed: it
// must parse, run, and deploy every service's chart with a live-updated local build.
func TestTiltfile(t *testing.T) {
	calls := map[string][]starlark.Tuple{}
	kwargs := map[string][][]starlark.Tuple{}
	record := func(name string, ret starlark.Value) *starlark.Builtin {
		return starlark.NewBuiltin(name, func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			calls[name] = append(calls[name], args)
			kwargs[name] = append(kwargs[name], kw)
			return ret, nil
		})
	}
	readYAML := starlark.NewBuiltin("read_yaml", func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
		raw, err := os.ReadFile(filepath.Join(repo, string(args[0].(starlark.String))))
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		return toStarlark(v), nil
	})
	exists := starlark.NewBuiltin("exists", func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
		return starlark.False, nil // a fresh clone has no tilt-settings.yaml
	})
	predeclared := starlark.StringDict{
		"os":               starlarkstruct.FromStringDict(starlark.String("os"), starlark.StringDict{"path": starlarkstruct.FromStringDict(starlark.String("path"), starlark.StringDict{"exists": exists})}),
		"read_yaml":        readYAML,
		"default_registry": record("default_registry", starlark.None),
		"local_resource":   record("local_resource", starlark.None),
		"docker_build":     record("docker_build", starlark.None),
		"k8s_yaml":         record("k8s_yaml", starlark.None),
		"helm":             record("helm", starlark.String("rendered")),
		"k8s_resource":     record("k8s_resource", starlark.None),
		"sync":             record("sync", starlark.String("sync")),
	}
	src, err := os.ReadFile(filepath.Join(repo, "Tiltfile"))
	if err != nil {
		t.Fatal(err)
	}
	thread := &starlark.Thread{Name: "tilt"}
	if _, err := starlark.ExecFileOptions(&syntax.FileOptions{TopLevelControl: true, GlobalReassign: true}, thread, "Tiltfile", src, predeclared); err != nil {
		t.Fatalf("Tiltfile: %v", err)
	}
	var charts []string
	for _, args := range calls["helm"] {
		charts = append(charts, string(args[0].(starlark.String)))
	}
	for _, svc := range services(t) {
		if !slices.Contains(charts, "deploy/charts/"+svc) {
			t.Errorf("Tiltfile does not deploy service %s (charts: %v)", svc, charts)
		}
		if _, err := os.Stat(filepath.Join(repo, "services", svc, "tilt-service.yaml")); err != nil {
			t.Errorf("service %s has no tilt-service.yaml", svc)
		}
	}
	if len(calls["docker_build"]) != len(services(t)) || len(calls["local_resource"]) != len(services(t)) {
		t.Errorf("want one local build and one image per service, got %d and %d", len(calls["local_resource"]), len(calls["docker_build"]))
	}
}

func toStarlark(v any) starlark.Value {
	switch x := v.(type) {
	case map[string]any:
		d := starlark.NewDict(len(x))
		for k, e := range x {
			_ = d.SetKey(starlark.String(k), toStarlark(e))
		}
		return d
	case []any:
		l := make([]starlark.Value, len(x))
		for i, e := range x {
			l[i] = toStarlark(e)
		}
		return starlark.NewList(l)
	case string:
		return starlark.String(x)
	case bool:
		return starlark.Bool(x)
	case float64:
		return starlark.Float(x)
	default:
		return starlark.None
	}
}
