package catalogtest_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/pkg/catalogtest"
)

// Every starter app's definition bounds its strings, and its chart renders the same objects
// whatever a customer writes into them.
func TestStarterCatalog(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "deploy", "catalog", "*", "chart"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no starter charts: %v", err)
	}
	for _, chart := range dirs {
		app := filepath.Dir(chart)
		t.Run(filepath.Base(app), func(t *testing.T) {
			t.Parallel()
			catalogtest.Run(t, catalogtest.Options{Definition: filepath.Join(app, "definition.yaml"), Chart: chart})
		})
	}
}

// The check finds a chart that writes a value bare, and a string the schema leaves unbounded.
func TestCheckFindsInjection(t *testing.T) {
	errs := catalogtest.Check(catalogtest.Options{
		Definition: filepath.Join("testdata", "injectable", "definition.yaml"),
		Chart:      filepath.Join("testdata", "injectable", "chart"),
	})
	var unbounded, injected bool
	for _, err := range errs {
		msg := err.Error()
		unbounded = unbounded || strings.Contains(msg, "spec.storageClass: a string without pattern, enum or maxLength")
		injected = injected || strings.Contains(msg, "spec.storageClass = ") && strings.Contains(msg, "written bare")
		if strings.Contains(msg, "spec.size") {
			t.Errorf("the quoted, bounded size was reported: %v", err)
		}
	}
	if !unbounded || !injected {
		t.Fatalf("want the unbounded and the injectable storageClass reported, got:\n%v", errs)
	}
}
