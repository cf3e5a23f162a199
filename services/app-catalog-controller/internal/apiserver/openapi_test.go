package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
)

// A client asking with the hash of an older document (as kube-apiserver's aggregator hands out
// for up to a minute) gets the current document, not a redirect the aggregator would refuse.
func TestOpenAPIServesTheCurrentDocumentForAStaleHash(t *testing.T) {
	svc := handler3.NewOpenAPIService()
	mux := http.NewServeMux()
	mux.Handle("/openapi/v3", http.HandlerFunc(svc.HandleDiscovery))
	mux.Handle("/openapi/v3/", currentOpenAPI(http.HandlerFunc(svc.HandleGroupVersion)))
	const gv = "apis/apps.flotilla.dev/v1alpha1"
	doc := func() *spec3.OpenAPI { return &spec3.OpenAPI{Version: "3.0.0", Paths: &spec3.Paths{}} }
	first := doc()
	first.Paths.Paths = map[string]*spec3.Path{"/apis/apps.flotilla.dev/v1alpha1/firsts": {}}
	svc.UpdateGroupVersion(gv, first)
	oldURL := rootURL(t, mux, gv)

	second := doc()
	second.Paths.Paths = map[string]*spec3.Path{"/apis/apps.flotilla.dev/v1alpha1/seconds": {}}
	svc.UpdateGroupVersion(gv, second)
	newURL := rootURL(t, mux, gv)
	if oldURL == newURL {
		t.Fatal("the document's hash did not change")
	}

	for _, c := range []struct {
		url, cache string
	}{
		{oldURL, "no-cache, private"},
		{newURL, "public, immutable"},
		{"/openapi/v3/" + gv, ""},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.url, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "seconds") {
			t.Errorf("%s: %d %s, want 200 with the current document", c.url, rec.Code, rec.Body.String())
		}
		if got := rec.Header().Get("Cache-Control"); got != c.cache {
			t.Errorf("%s: Cache-Control %q, want %q", c.url, got, c.cache)
		}
		if loc := rec.Header().Get("Location"); loc != "" {
			t.Errorf("%s: redirects to %s", c.url, loc)
		}
	}
}

// rootURL is the URL the OpenAPI v3 root lists for a group-version.
func rootURL(t *testing.T, h http.Handler, gv string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi/v3", nil))
	i := strings.Index(rec.Body.String(), "/openapi/v3/"+gv+"?hash=")
	if i < 0 {
		t.Fatalf("root lists no %s: %s", gv, rec.Body.String())
	}
	rest := rec.Body.String()[i:]
	return rest[:strings.IndexByte(rest, '"')]
}
