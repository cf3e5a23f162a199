package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// A tenant user's plain kubectl, with a fresh cache, creates an app of a kind the moment the kind
// is served, even while kube-apiserver's aggregated OpenAPI v3 still lists the group-version with
// the hash of an older document (it refetches once a minute): kubectl validates against that
// OpenAPI and, when the kind is not found there, falls back to listing CRDs, which tenants may not.
func TestTenantKubectlRightAfterALiveAdd(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "seated")
	tenantAdmin(t, ns, "seated")
	schema := []byte(`{"type":"object","properties":{"replicas":{"type":"integer","default":1},"note":{"type":"string","maxLength":64}}}`)
	for kind, plural := range map[string]string{"Stool": "stools", "Seat": "seats"} {
		def := testDefinition(t, kind, plural, nil)
		t.Cleanup(func() { _ = kube.Delete(ctx, def) })
	}
	// A first kind, and the aggregator's next refresh: from then on it lists an older hash.
	before := aggregatedOpenAPIHash(t)
	if err := kube.Create(ctx, testDefinition(t, "Stool", "stools", func(d *catalogv1.ApplicationDefinition) { d.Spec.Schema.Raw = schema })); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the aggregator to refetch the apps OpenAPI", func() (bool, error) {
		return aggregatedOpenAPIHash(t) != before, nil
	})

	if err := kube.Create(ctx, testDefinition(t, "Seat", "seats", func(d *catalogv1.ApplicationDefinition) { d.Spec.Schema.Raw = schema })); err != nil {
		t.Fatal(err)
	}
	waitDiscovered(t, "seats", true)
	served := time.Now()
	manifest := "apiVersion: apps.flotilla.dev/v1alpha1\nkind: Seat\nmetadata: {name: first, namespace: " + ns + "}\nspec: {note: hello}\n"
	out, err := kubectl(t, manifest, "create", "-f", "-", "--as", "seated", "--as-group", ns+"-admin")
	if err != nil {
		var at time.Duration
		eventually(t, 90*time.Second, "the tenant's kubectl create to work", func() (bool, error) {
			o, err := kubectl(t, manifest, "create", "-f", "-", "--as", "seated", "--as-group", ns+"-admin")
			at = time.Since(served)
			return err == nil || strings.Contains(o, "AlreadyExists"), nil
		})
		t.Fatalf("the tenant's first kubectl create failed (it worked %v after the kind was served): %v\n%s", at, err, out)
	}
}

// aggregatedOpenAPIHash is the URL kube-apiserver's OpenAPI v3 root lists for apps.flotilla.dev.
func aggregatedOpenAPIHash(t *testing.T) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/openapi/v3").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	return root.Paths["apis/"+catalogv1.AppsGroupVersion.String()].ServerRelativeURL
}
