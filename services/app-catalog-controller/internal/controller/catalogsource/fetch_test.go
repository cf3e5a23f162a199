package catalogsource

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

type release struct{ version, definition string }

// serveIndex serves a Helm repository index of the charts' releases.
func serveIndex(t *testing.T, charts map[string][]release) string {
	t.Helper()
	entries := map[string][]map[string]any{}
	for chart, releases := range charts {
		for _, r := range releases {
			e := map[string]any{"name": chart, "version": r.version}
			if r.definition != "" {
				e["annotations"] = map[string]string{catalogv1.AnnotationChartDefinition: r.definition}
			}
			entries[chart] = append(entries[chart], e)
		}
	}
	index, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "entries": entries})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(index) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

const definition = `apiVersion: catalog.flotilla.dev/v1alpha1
kind: ApplicationDefinition
metadata: {name: caches}
spec: {names: {kind: Cache, plural: caches}, chart: {name: x, sourceRef: {kind: HelmRepository, name: x, namespace: x}}, schema: {type: object}}
`

var fetcher = &Fetcher{HTTP: http.DefaultClient, MaxSize: 1 << 20}

// A chart is offered by its newest release: when that release dropped the annotation, the chart
// is no longer an app, whatever older releases carried; pre-releases never count.
func TestChartDefinitionsNewestReleaseOnly(t *testing.T) {
	url := serveIndex(t, map[string][]release{
		"cache": {{"1.0.0", definition}, {"1.1.0", ""}},
		"beta":  {{"2.0.0-beta.1", definition}},
		"kept":  {{"0.9.0", definition}, {"0.10.0", strings.Replace(definition, "caches", "kepts", 2)}, {"0.11.0-rc.1", ""}},
	})
	repo := catalogv1.SourceReference{Kind: "HelmRepository", Name: "r", Namespace: "ns"}
	defs, err := fetcher.ChartDefinitions(context.Background(), url, "", repo)
	if err != nil || len(defs) != 1 {
		t.Fatalf("got %d definitions, %v; want the one of kept", len(defs), err)
	}
	if want := (catalogv1.Chart{SourceRef: repo, Name: "kept", Version: "0.10.0"}); defs[0].Name != "kepts" || defs[0].Spec.Chart != want {
		t.Fatalf("got %s with chart %+v, want kepts with %+v", defs[0].Name, defs[0].Spec.Chart, want)
	}
}

// An annotation that is not exactly one ApplicationDefinition fails the source, naming the chart.
func TestChartDefinitionsRejectsOtherContent(t *testing.T) {
	for name, annotation := range map[string]string{
		"a Secret":       "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
		"two":            definition + "---\n" + definition,
		"unknown fields": definition + "evil: true\n",
	} {
		url := serveIndex(t, map[string][]release{"cache": {{"1.0.0", annotation}}})
		_, err := fetcher.ChartDefinitions(context.Background(), url, "", catalogv1.SourceReference{})
		if err == nil || !strings.Contains(err.Error(), "chart cache 1.0.0") {
			t.Errorf("%s: %v", name, err)
		}
		if !errors.As(err, &invalidArtifact{}) {
			t.Errorf("%s: %v is not reported as the artifact's fault (Stalled)", name, err)
		}
	}
}

// A source that cannot be reached is a failure to retry (Reconciling), not the artifact's fault.
func TestUnreachableArtifactIsRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer srv.Close()
	_, err := fetcher.ChartDefinitions(context.Background(), srv.URL, "", catalogv1.SourceReference{})
	if err == nil || errors.As(err, &invalidArtifact{}) {
		t.Fatalf("unreachable source: %v, want an error to retry", err)
	}
}
