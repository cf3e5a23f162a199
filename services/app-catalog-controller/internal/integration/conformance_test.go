package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver/apiservertest"
)

// jotSchema is the values schema of the conformance kind and of its CRD twin.
const jotSchema = `{"type":"object","properties":{"replicas":{"type":"integer","default":1},"note":{"type":"string","maxLength":64}}}`

// Plain kubectl, as each tenant role with a fresh cache, right after a kind is added live (and
// again right after it changes), behaves on an app kind exactly as on a CRD of the same schema
// granted to the same roles: every verb the role allows works, every other is refused by the
// server (403), and nothing fails on the client side.
func TestTenantKubectlConformance(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "conform")
	def, twin := withTwin(t, "Jot", "jots", jotSchema)

	kinds := []conformanceKind{
		{"app", "apps.flotilla.dev/v1alpha1", "Jot", "jots.apps.flotilla.dev"}, // "jots" alone would be the CRD's
		{"twin", "twin.flotilla.dev/v1", "Jot", twin.Resource + "." + twin.Group},
	}
	runConformance(t, ns, kinds)
	// Right after the kind changes, its new field is known to a fresh kubectl.
	cur := &catalogv1.ApplicationDefinition{}
	if err := kube.Get(ctx, client.ObjectKey{Name: def.Name}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Schema.Raw = []byte(strings.Replace(jotSchema, `"note":`, `"color":{"type":"string","enum":["red","blue"]},"note":`, 1))
	if err := kube.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	colored := strings.Replace(manifest("apps.flotilla.dev/v1alpha1", "Jot", ns, "colored", "a"), "spec: {}", "spec: {color: red}", 1)
	eventually(t, 30*time.Second, "the server to accept the new field", func() (bool, error) {
		_, err := kubectl(t, colored, "create", "--dry-run=server", "-f", "-")
		return err == nil, nil
	})
	if out, err := kubectl(t, colored, "apply", "-f", "-", "--as", "admin-user", "--as-group", ns+"-admin"); err != nil {
		t.Fatalf("a tenant's kubectl right after the kind changed: %v\n%s", err, out)
	}
}

// Every starter kind, as each tenant role with a fresh kubectl: every verb the role allows works,
// every other is refused by the server, nothing fails on the client side (the CRD twin of the test
// above is the reference for what "the same" means).
func TestTenantKubectlConformanceStarterKinds(t *testing.T) {
	ns := tenantNamespace(t, "conformstarter")
	var kinds []conformanceKind
	for _, app := range starterApps(t) {
		def := installDefinition(t, app)
		kinds = append(kinds, conformanceKind{app, "apps.flotilla.dev/v1alpha1", def.Spec.Names.Kind, def.Spec.Names.Plural + ".apps.flotilla.dev"})
	}
	runConformance(t, ns, kinds)
}

// conformanceKind is a kind the conformance sequence runs against.
type conformanceKind struct{ name, apiVersion, kind, plural string }

// runConformance runs every verb as each tenant role (readers first: the admin's edit changes the
// shared objects) against each kind and checks the outcome the role's rules promise; kinds given
// together must agree.
func runConformance(t *testing.T, ns string, kinds []conformanceKind) {
	t.Helper()
	for _, k := range kinds { // what readers act on
		if out, err := kubectl(t, manifest(k.apiVersion, k.kind, ns, "shared", "a"), "create", "-f", "-"); err != nil {
			t.Fatalf("%s: %v\n%s", k.name, err, out)
		}
	}
	for _, r := range []struct {
		role   string
		writes bool
	}{{"view", false}, {"use", false}, {"admin", true}} {
		for _, verb := range conformanceVerbs {
			want := "ok"
			if verb.writes && !r.writes {
				want = "forbidden"
			}
			got := map[string]string{}
			for _, k := range kinds {
				out, err := verb.run(t, k, ns, r.role+verb.name, "--as", r.role+"-user", "--as-group", ns+"-"+r.role)
				got[k.name] = outcome(verb.name, out, err)
				if got[k.name] != want {
					t.Errorf("%s %s as %s: %s, want %s:\n%s", k.name, verb.name, r.role, got[k.name], want, out)
				}
			}
			if len(kinds) == 2 && got[kinds[0].name] != got[kinds[1].name] {
				t.Errorf("%s as %s: %s %s, %s %s", verb.name, r.role, kinds[0].name, got[kinds[0].name], kinds[1].name, got[kinds[1].name])
			}
		}
	}
}

// conformanceVerb is one kubectl verb run against a kind.
type conformanceVerb struct {
	name   string
	writes bool
	run    func(t *testing.T, k conformanceKind, ns, name string, as ...string) (string, error)
}

var conformanceVerbs = []conformanceVerb{
	{"create", true, func(t *testing.T, k conformanceKind, ns, name string, as ...string) (string, error) {
		return kubectl(t, manifest(k.apiVersion, k.kind, ns, name, "a"), append([]string{"create", "-f", "-"}, as...)...)
	}},
	{"apply", true, func(t *testing.T, k conformanceKind, ns, name string, as ...string) (string, error) {
		return kubectl(t, manifest(k.apiVersion, k.kind, ns, name, "a"), append([]string{"apply", "-f", "-"}, as...)...)
	}},
	{"applyserverside", true, func(t *testing.T, k conformanceKind, ns, name string, as ...string) (string, error) {
		return kubectl(t, manifest(k.apiVersion, k.kind, ns, name, "a"), append([]string{"apply", "--server-side", "-f", "-"}, as...)...)
	}},
	{"diff", true, func(t *testing.T, k conformanceKind, ns, _ string, as ...string) (string, error) {
		return kubectl(t, manifest(k.apiVersion, k.kind, ns, "shared", "b"), append([]string{"diff", "-f", "-"}, as...)...)
	}},
	{"explain", false, func(t *testing.T, k conformanceKind, _, _ string, as ...string) (string, error) {
		short, _, _ := strings.Cut(k.plural, ".")
		out, err := kubectl(t, "", append([]string{"explain", short + ".spec", "--api-version", k.apiVersion}, as...)...)
		if err == nil && !strings.Contains(out, "GROUP:      "+strings.Split(k.apiVersion, "/")[0]) {
			return out, fmt.Errorf("explained another kind")
		}
		return out, err
	}},
	{"getwatch", false, func(t *testing.T, k conformanceKind, ns, _ string, as ...string) (string, error) {
		return kubectl(t, "", append([]string{"get", k.plural, "-n", ns, "-w", "--request-timeout=3s"}, as...)...)
	}},
	{"wait", false, func(t *testing.T, k conformanceKind, ns, _ string, as ...string) (string, error) {
		return kubectl(t, "", append([]string{"wait", "-n", ns, k.plural + "/shared", "--for=jsonpath={.metadata.labels.note}=a", "--timeout=20s"}, as...)...)
	}},
	{"edit", true, func(t *testing.T, k conformanceKind, ns, _ string, as ...string) (string, error) {
		return kubectlEdit(t, append([]string{"edit", "-n", ns, k.plural + "/shared"}, as...)...)
	}},
	{"delete", true, func(t *testing.T, k conformanceKind, ns, name string, as ...string) (string, error) {
		// The admin deletes what it created; readers try the shared object.
		target := "shared"
		if strings.HasPrefix(name, "admin") {
			target = "admincreate"
		}
		return kubectl(t, "", append([]string{"delete", "-n", ns, k.plural + "/" + target, "--wait=false"}, as...)...)
	}},
}

// outcome classifies a kubectl run: ok, forbidden (refused by the server's authorization), or
// client (anything else: a failure before or beside the server's answer).
func outcome(verb, out string, err error) string {
	switch {
	case err == nil:
		return "ok"
	case strings.Contains(out, "forbidden") || strings.Contains(out, "Forbidden"):
		return "forbidden"
	case verb == "diff" && exitCode(err) == 1: // differences found
		return "ok"
	case verb == "getwatch" && strings.Contains(out, "shared") && !strings.Contains(out, "rror"):
		return "ok" // the watch ran until its timeout
	}
	return "client"
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	return -1
}

// manifest is an object of a kind with the given note label (what readers wait for and the
// editor changes) and an empty spec: every starter kind's defaults are valid.
func manifest(apiVersion, kind, ns, name, note string) string {
	return fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n  namespace: %s\n  labels:\n    note: %s\nspec: {}\n", apiVersion, kind, name, ns, note)
}

// kubectlEdit runs kubectl edit with an editor that changes the note.
func kubectlEdit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return kubectlEnv(t, []string{`KUBE_EDITOR=sed -i s/note:\ a/note:\ c/`}, "", args...)
}

// withTwin serves kind as an app kind whose definition has specSchema and as its CRD twin of
// the same schema; it returns the definition and the twin's resource.
func withTwin(t *testing.T, kind, plural, specSchema string) (*catalogv1.ApplicationDefinition, schema.GroupVersionResource) {
	t.Helper()
	twin := twinCRD(t, kind, plural, specSchema)
	def := testDefinition(t, kind, plural, func(d *catalogv1.ApplicationDefinition) { d.Spec.Schema.Raw = []byte(specSchema) })
	if err := kube.Create(context.Background(), def); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), def) })
	waitDiscovered(t, plural, true)
	return def, twin
}

// twinCRD makes a reference: a CRD of kind in twin.flotilla.dev/v1 whose spec has
// specSchema, granted to the tenant roles the way apps are (read for every role, write for admin).
func twinCRD(t *testing.T, kind, plural, specSchema string) schema.GroupVersionResource {
	t.Helper()
	ctx := context.Background()
	crd, err := apiservertest.CRD("twin.flotilla.dev", kind, plural, specSchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, r := range []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "twin-read", Labels: map[string]string{
			"flotilla.dev/aggregate-to-tenant-view": "true", "flotilla.dev/aggregate-to-tenant-use": "true",
			"flotilla.dev/aggregate-to-tenant-admin": "true", "flotilla.dev/aggregate-to-tenant-super-admin": "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"twin.flotilla.dev"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "twin-write", Labels: map[string]string{
			"flotilla.dev/aggregate-to-tenant-admin": "true", "flotilla.dev/aggregate-to-tenant-super-admin": "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"twin.flotilla.dev"}, Resources: []string{"*"}, Verbs: []string{"create", "update", "patch", "delete", "deletecollection"}}}},
	} {
		if err := kube.Create(ctx, r); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the twin CRD to be served", func() (bool, error) {
		_, err := kubectl(t, "", "get", plural+".twin.flotilla.dev", "-A")
		return err == nil, nil
	})
	return schema.GroupVersionResource{Group: "twin.flotilla.dev", Version: "v1", Resource: plural}
}

// starterApps are the starter catalog's apps (deploy/catalog/<app>/definition.yaml).
func starterApps(t *testing.T) []string {
	t.Helper()
	defs, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "catalog", "*", "definition.yaml"))
	if err != nil || len(defs) == 0 {
		t.Fatalf("no starter definitions: %v", err)
	}
	var apps []string
	for _, d := range defs {
		apps = append(apps, filepath.Base(filepath.Dir(d)))
	}
	return apps
}
