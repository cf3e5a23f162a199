package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// A LIST is served in every representation clients ask for, concurrently, from the same stored
// apps: plain JSON (written from each app's memoized JSON), YAML, a Table with whole objects
// (which the handler converts in place), a Table with metadata, and PartialObjectMetadata. Each
// item is what a GET of it returns. Under the race detector this also shows that no
// representation modifies the stored apps that lists share.
func TestListEveryRepresentation(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	ns := tenantNamespace(t, "listers")
	pg := apps.Resource(postgresGVR).Namespace(ns)
	for i := range 8 {
		if _, err := pg.Create(ctx, appObject("Postgres", ns, fmt.Sprintf("l%d", i), fmt.Sprintf(`{"replicas":%d}`, 1+i%3)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimSuffix(env.Config.Host, "/") + "/apis/apps.flotilla.dev/v1alpha1/namespaces/" + ns + "/postgreses"
	get := func(accept, query string) []byte {
		req, err := http.NewRequest(http.MethodGet, path+query, nil)
		if err != nil {
			t.Error(err)
			return nil
		}
		req.Header.Set("Accept", accept)
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s as %s: %s %v: %s", query, accept, resp.Status, err, body)
		}
		return body
	}
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	checks := []struct {
		accept, query string
		check         func(body []byte) error
	}{
		{"application/json", "", func(b []byte) error { return sameApps(ctx, b) }},
		{"application/yaml", "", func(b []byte) error { return sameApps(ctx, b) }},
		{table, "?includeObject=Object", func(b []byte) error { return tableOf(b, "Postgres") }},
		{table, "", func(b []byte) error { return tableOf(b, "PartialObjectMetadata") }},
		{"application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", "", func(b []byte) error {
			var l metav1.PartialObjectMetadataList
			if err := json.Unmarshal(b, &l); err != nil || len(l.Items) != 8 || l.Items[0].Name != "l0" {
				return fmt.Errorf("partial metadata list: %v: %s", err, b)
			}
			return nil
		}},
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				for _, c := range checks {
					if err := c.check(get(c.accept, c.query)); err != nil {
						t.Errorf("%s%s: %v", c.accept, c.query, err)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// sameApps checks that a list (JSON or YAML) holds the namespace's apps in order, each exactly
// as a GET returns it.
func sameApps(ctx context.Context, body []byte) error {
	raw, err := yaml.YAMLToJSON(body) // JSON is YAML too
	if err != nil {
		return err
	}
	list := &unstructured.UnstructuredList{}
	if err := list.UnmarshalJSON(raw); err != nil { // decoded as the dynamic client decodes a GET
		return err
	}
	if list.GetKind() != "PostgresList" || list.GetAPIVersion() != "apps.flotilla.dev/v1alpha1" || list.GetResourceVersion() == "" || len(list.Items) != 8 {
		return fmt.Errorf("not the list of 8 apps: %s", body)
	}
	for i, item := range list.Items {
		if item.GetName() != fmt.Sprintf("l%d", i) {
			return fmt.Errorf("item %d is %s", i, item.GetName())
		}
		got, err := apps.Resource(postgresGVR).Namespace(item.GetNamespace()).Get(ctx, item.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		// helm-controller may have written the app's status since: compare the same version.
		if got.GetResourceVersion() == item.GetResourceVersion() && !equality.Semantic.DeepEqual(got.Object, item.Object) {
			return fmt.Errorf("item %s differs from its GET:\n%v\n%v", item.GetName(), item.Object, got.Object)
		}
	}
	return nil
}

func tableOf(body []byte, objectKind string) error {
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil {
		return err
	}
	if len(tbl.Rows) != 8 {
		return fmt.Errorf("%d rows", len(tbl.Rows))
	}
	var obj metav1.TypeMeta
	if err := json.Unmarshal(tbl.Rows[0].Object.Raw, &obj); err != nil || obj.Kind != objectKind {
		return fmt.Errorf("row object is %q, want %s (%v)", obj.Kind, objectKind, err)
	}
	return nil
}
