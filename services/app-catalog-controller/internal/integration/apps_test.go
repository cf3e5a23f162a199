package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

var postgresGVR = schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "postgreses"}

// installDefinition creates a starter catalog definition and waits until kube-apiserver's
// discovery lists its kind.
func installDefinition(t *testing.T, app string) *catalogv1.ApplicationDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "catalog", app, "definition.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	def := &catalogv1.ApplicationDefinition{}
	if err := yaml.UnmarshalStrict(raw, def); err != nil {
		t.Fatal(err)
	}
	// No kubelet runs here, so no pod ever does: an app whose definition waits for its pods would
	// never be Ready. These tests are about the apps API and its delivery; the starter apps'
	// readiness is tested on a real node (e2e).
	def.Spec.Readiness = catalogv1.Readiness{}
	ctx := context.Background()
	if err := kube.Create(ctx, def); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	waitDiscovered(t, def.Spec.Names.Plural, true)
	return def
}

func waitDiscovered(t *testing.T, plural string, want bool) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "discovery of "+plural, func() (bool, error) {
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			return false, err
		}
		found := false
		for _, l := range lists {
			if l.GroupVersion != "apps.flotilla.dev/v1alpha1" {
				continue
			}
			for _, r := range l.APIResources {
				found = found || r.Name == plural
			}
		}
		return found == want, nil
	})
}

// tenantNamespace makes a child tenant of the root tenant (which provides ingress and etcd to
// its descendants) and returns its namespace once the real tenant-controller has it Ready: the
// namespace, the tenant roles' bindings and the delivery namespace are the controller's.
func tenantNamespace(t *testing.T, name string) string {
	t.Helper()
	return tenantNamespaceWith(t, name, tenancyv1.TenantSpec{})
}

// tenantNamespaceWith is tenantNamespace for a child tenant of the given spec.
func tenantNamespaceWith(t *testing.T, name string, spec tenancyv1.TenantSpec) string {
	t.Helper()
	ctx := context.Background()
	for _, tn := range []*tenancyv1.Tenant{
		{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootName, Namespace: tenancyv1.RootNamespace}, Spec: tenancyv1.TenantSpec{Ingress: true, Etcd: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenancyv1.RootNamespace}, Spec: spec},
	} {
		if err := kube.Create(ctx, tn); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "tenant "+name+" Ready", func() (bool, error) {
		tn := &tenancyv1.Tenant{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.RootNamespace, Name: name}, tn); err != nil {
			return false, err
		}
		return apimeta.IsStatusConditionTrue(tn.Status.Conditions, "Ready") && tn.Status.ObservedGeneration == tn.Generation, nil
	})
	return "tenant-" + name
}

func TestDefinitionServedWithoutRestart(t *testing.T) {
	waitDiscovered(t, "postgreses", false)
	start := time.Now()
	installDefinition(t, "postgres")
	t.Logf("postgreses discovered %v after the definition was created", time.Since(start))

	// kube-apiserver's OpenAPI aggregator refetches the server's document on the APIService's
	// change; kubectl explain reads the merged document.
	eventually(t, 30*time.Second, "kubectl explain", func() (bool, error) {
		out, err := kubectl(t, "", "explain", "postgres.spec.storage.size")
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, out)
		}
		return strings.Contains(out, "Size of each instance's volume"), nil
	})
}

func TestAppLifecycleThroughFlux(t *testing.T) {
	installDefinition(t, "postgres")
	ns := tenantNamespace(t, "acme")
	ctx := context.Background()

	out, err := kubectl(t, `
apiVersion: apps.flotilla.dev/v1alpha1
kind: Postgres
metadata:
  name: db
  namespace: `+ns+`
  labels: {team: billing}
spec:
  replicas: 3
  parameters: {max_connections: "200"}
`, "apply", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	hr := &helmv2.HelmRelease{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-db"}, hr); err != nil {
		t.Fatalf("HelmRelease: %v", err)
	}
	if hr.Labels[catalogv1.LabelAppKind] != "Postgres" || hr.Labels["team"] != "billing" {
		t.Fatalf("HelmRelease labels: %v", hr.Labels)
	}
	if !strings.Contains(string(hr.Spec.Values.Raw), `"tenant":"acme"`) {
		t.Fatalf("platform values missing: %s", hr.Spec.Values.Raw)
	}

	cluster := &unstructured.Unstructured{}
	cluster.SetAPIVersion("postgresql.cnpg.io/v1")
	cluster.SetKind("Cluster")
	eventually(t, 90*time.Second, "the chart's CNPG Cluster", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-db"}, cluster)
		return err == nil, err
	})
	if n, _, _ := unstructured.NestedInt64(cluster.Object, "spec", "instances"); n != 3 {
		t.Fatalf("instances = %d, want 3", n)
	}
	if out, err := kubectl(t, "", "wait", "-n", ns, "postgres/db", "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	out, err = kubectl(t, "", "get", "-n", ns, "postgres")
	if err != nil || !strings.Contains(out, "VERSION") || !strings.Contains(out, "0.1.2") {
		t.Fatalf("kubectl get: %v\n%s", err, out)
	}

	// Values change → upgrade, by server-side apply. Field ownership is kept with the app: the
	// first apply conflicts with the client-side apply's manager, as it would on any kind.
	ssa := `
apiVersion: apps.flotilla.dev/v1alpha1
kind: Postgres
metadata: {name: db, namespace: ` + ns + `}
spec: {replicas: 4}
`
	if out, err := kubectl(t, ssa, "apply", "--server-side", "--field-manager=ci", "-f", "-"); err == nil || !strings.Contains(out, "conflict with \"kubectl-client-side-apply\"") || !strings.Contains(out, ".spec.replicas") {
		t.Fatalf("kubectl apply --server-side: want a conflict on .spec.replicas, got %v\n%s", err, out)
	}
	if out, err := kubectl(t, ssa, "apply", "--server-side", "--field-manager=ci", "--force-conflicts", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply --server-side --force-conflicts: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "get", "-n", ns, "postgres/db", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"); err != nil || !strings.Contains(out, "ci") {
		t.Fatalf("managed fields: %v %q", err, out)
	}
	eventually(t, 90*time.Second, "the upgrade to 4 instances", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-db"}, cluster); err != nil {
			return false, err
		}
		n, _, _ := unstructured.NestedInt64(cluster.Object, "spec", "instances")
		return n == 4, nil
	})

	// A forbidden value is a 422 naming the path, and nothing is written.
	before := &helmv2.HelmRelease{}
	_ = kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-db"}, before)
	out, err = kubectl(t, "", "patch", "-n", ns, "postgres/db", "--type=merge", "-p", `{"spec":{"parameters":{"shared_preload_libraries":"evil"}}}`)
	if err == nil || !strings.Contains(out, "spec.parameters.shared_preload_libraries: Forbidden") {
		t.Fatalf("forbidden path accepted or badly reported: %v\n%s", err, out)
	}
	after := &helmv2.HelmRelease{}
	_ = kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-db"}, after)
	if before.Generation != after.Generation || string(before.Spec.Values.Raw) != string(after.Spec.Values.Raw) {
		t.Fatalf("the rejected patch changed the HelmRelease")
	}

	// Server-side dry runs are validated and write nothing: a create, an update, a delete.
	dry := "apiVersion: apps.flotilla.dev/v1alpha1\nkind: Postgres\nmetadata: {name: dry, namespace: " + ns + "}\nspec: {replicas: 2}\n"
	if out, err := kubectl(t, dry, "create", "--dry-run=server", "-f", "-"); err != nil {
		t.Fatalf("dry-run create: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "patch", "-n", ns, "postgres/db", "--dry-run=server", "--type=merge", "-p", `{"spec":{"replicas":5}}`); err != nil {
		t.Fatalf("dry-run patch: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "delete", "-n", ns, "postgres/db", "--dry-run=server"); err != nil {
		t.Fatalf("dry-run delete: %v\n%s", err, out)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-dry"}, &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry-run create wrote a HelmRelease: %v", err)
	}
	dried := &helmv2.HelmRelease{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-db"}, dried); err != nil || dried.DeletionTimestamp != nil || dried.Generation != after.Generation {
		t.Fatalf("a dry-run patch or delete changed the HelmRelease: %v", err)
	}

	// Deletion.
	if out, err := kubectl(t, "", "delete", "-n", ns, "postgres/db", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	eventually(t, 90*time.Second, "the HelmRelease to go", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-db"}, &helmv2.HelmRelease{})
		return apierrors.IsNotFound(err), nil
	})
}
