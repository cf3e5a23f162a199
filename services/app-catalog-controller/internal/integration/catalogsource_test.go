package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// pushCatalog publishes files as a Flux OCI artifact (a gzipped tarball layer) to an in-process
// OCI registry (go-containerregistry's) and returns the oci:// URL of the repository.
func pushCatalog(t *testing.T, reg *httptest.Server, repo string, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for path, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.cncf.flux.config.v1+json")
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(buf.Bytes(), "application/vnd.cncf.flux.content.v1.tar+gzip")})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(reg.URL, "http://")
	ref, err := name.ParseReference(host+"/"+repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return "oci://" + host + "/" + repo
}

func definitionYAML(kind, plural string) string {
	return fmt.Sprintf(`apiVersion: catalog.flotilla.dev/v1alpha1
kind: ApplicationDefinition
metadata:
  name: %s
spec:
  names: {kind: %s, plural: %s}
  chart:
    sourceRef: {kind: HelmRepository, name: flotilla-catalog, namespace: flotilla-system}
    name: redis
  schema:
    type: object
    properties:
      replicas: {type: integer, default: 1, minimum: 1, maximum: 5}
`, plural, kind, plural)
}

func ociSource(t *testing.T, name, url string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
		"metadata": map[string]any{"name": name, "namespace": catalogNamespace},
		"spec":     map[string]any{"url": url, "ref": map[string]any{"tag": "v1"}, "insecure": true, "interval": "1m"},
	}}
	if err := kube.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// catalogSource creates a CatalogSource of the Flux source kind/name (in the catalog namespace),
// deleted after the test.
func catalogSource(t *testing.T, kind, name, path string) *catalogv1.CatalogSource {
	t.Helper()
	src := &catalogv1.CatalogSource{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: catalogv1.CatalogSourceSpec{
		SourceRef: catalogv1.SourceReference{Kind: kind, Name: name, Namespace: catalogNamespace}, Path: path}}
	if err := kube.Create(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), src) })
	return src
}

// helmSource creates a HelmRepository and a CatalogSource reading it, both named name.
func helmSource(t *testing.T, name string, spec sourcev1.HelmRepositorySpec) {
	t.Helper()
	spec.Interval = metav1.Duration{Duration: time.Minute}
	repo := &sourcev1.HelmRepository{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: catalogNamespace}, Spec: spec}
	if err := kube.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	catalogSource(t, "HelmRepository", name, "")
}

func waitSource(t *testing.T, name, condType, reason string) *catalogv1.CatalogSource {
	t.Helper()
	src := &catalogv1.CatalogSource{}
	eventually(t, 60*time.Second, "CatalogSource "+name+" "+condType+"="+reason, func() (bool, error) {
		if err := kube.Get(context.Background(), client.ObjectKey{Name: name}, src); err != nil {
			return false, err
		}
		for _, c := range src.Status.Conditions {
			if c.Type == condType && c.Status == metav1.ConditionTrue && c.Reason == reason {
				return src.Status.ObservedGeneration == src.Generation, nil
			}
		}
		return false, nil
	})
	return src
}

func TestCatalogSourceAddsDefinitionsAndReportsConflicts(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres") // written by hand
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)

	// A partner's catalog with two apps.
	ociSource(t, "partner", pushCatalog(t, reg, "partner/catalog", map[string]string{
		"apps/memcache.yaml": definitionYAML("Memcache", "memcaches"),
		"apps/keydb.yaml":    definitionYAML("Keydb", "keydbs"),
		"README.md":          "not a definition",
	}))
	partner := catalogSource(t, "OCIRepository", "partner", "apps")
	src := waitSource(t, "partner", "Ready", "Succeeded")
	if fmt.Sprint(src.Status.Definitions) != "[keydbs memcaches]" {
		t.Fatalf("definitions %v", src.Status.Definitions)
	}
	waitDiscovered(t, "memcaches", true)
	def := &catalogv1.ApplicationDefinition{}
	if err := kube.Get(ctx, client.ObjectKey{Name: "memcaches"}, def); err != nil || def.Labels[catalogv1.LabelSource] != "partner" {
		t.Fatalf("memcaches: %v %v", err, def.Labels)
	}

	// A second source defining kinds that exist already: reported, never applied.
	ociSource(t, "rogue", pushCatalog(t, reg, "rogue/catalog", map[string]string{
		"pg.yaml":  strings.Replace(definitionYAML("Postgres", "pgs"), "redis", "evil", 1),
		"mc.yaml":  definitionYAML("Memcache", "memcaches"),
		"new.yaml": definitionYAML("Etcd", "etcds"),
	}))
	catalogSource(t, "OCIRepository", "rogue", "")
	src = waitSource(t, "rogue", "Stalled", catalogv1.KindConflictReason)
	if len(src.Status.Conflicts) != 2 || !strings.Contains(strings.Join(src.Status.Conflicts, "\n"), "kind Postgres is defined by postgreses (written by hand)") {
		t.Fatalf("conflicts %v", src.Status.Conflicts)
	}
	if fmt.Sprint(src.Status.Definitions) != "[etcds]" {
		t.Fatalf("rogue applied %v", src.Status.Definitions)
	}
	if err := kube.Get(ctx, client.ObjectKey{Name: "memcaches"}, def); err != nil || def.Labels[catalogv1.LabelSource] != "partner" {
		t.Fatalf("memcaches was taken over: %v %v", err, def.Labels)
	}
	if err := kube.Get(ctx, client.ObjectKey{Name: "pgs"}, def); !apierrors.IsNotFound(err) {
		t.Fatalf("the conflicting Postgres definition was applied: %v", err)
	}

	// A definition the source applied and someone deleted or edited is put back.
	keydbs := &catalogv1.ApplicationDefinition{}
	if err := kube.Get(ctx, client.ObjectKey{Name: "keydbs"}, keydbs); err != nil {
		t.Fatal(err)
	}
	if err := kube.Delete(ctx, keydbs); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the deleted keydbs to be put back", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: "keydbs"}, def)
		return err == nil && def.UID != keydbs.UID, client.IgnoreNotFound(err)
	})
	if err := kube.Get(ctx, client.ObjectKey{Name: "memcaches"}, def); err != nil {
		t.Fatal(err)
	}
	want := def.Spec.Display.Description
	def.Spec.Display.Description = "tampered"
	if err := kube.Update(ctx, def); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the edited memcaches to be restored", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: "memcaches"}, def)
		return err == nil && def.Spec.Display.Description == want, err
	})

	// Deleting a source removes what it created, nothing else; a conflict that goes away with it
	// is acted on: the rogue source's Memcache definition is applied in turn.
	if err := kube.Delete(ctx, partner); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "partner's memcaches to go and rogue's to come", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: "memcaches"}, def)
		return err == nil && def.Labels[catalogv1.LabelSource] == "rogue", client.IgnoreNotFound(err)
	})
	// The definition is applied before rogue's status says so: wait for the status too.
	eventually(t, 60*time.Second, "rogue to report memcaches applied", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: "rogue"}, src)
		return err == nil && fmt.Sprint(src.Status.Definitions) == "[etcds memcaches]", err
	})
	if src = waitSource(t, "rogue", "Stalled", catalogv1.KindConflictReason); fmt.Sprint(src.Status.Definitions) != "[etcds memcaches]" {
		t.Fatalf("rogue applied %v once partner was gone", src.Status.Definitions)
	}
	eventually(t, 60*time.Second, "partner's keydbs to go", func() (bool, error) {
		return apierrors.IsNotFound(kube.Get(ctx, client.ObjectKey{Name: "keydbs"}, def)), nil
	})
	if err := kube.Get(ctx, client.ObjectKey{Name: "postgreses"}, def); err != nil {
		t.Fatalf("the hand-written definition went too: %v", err)
	}
}

// writeChart writes a chart whose ConfigMap shows its values, with the definition (if any) in
// its Chart.yaml annotation.
func writeChart(t *testing.T, dir, name, version, definition string) string {
	t.Helper()
	return writeChartWith(t, dir, name, version, definition, map[string]string{
		"values.yaml": "replicas: 1\n",
		"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n" +
			"data:\n  replicas: {{ .Values.replicas | quote }}\n  chart: {{ .Chart.Version | quote }}\n",
	})
}

// writeChartWith writes a chart of the given files (values and templates), with the definition
// (if any) in its Chart.yaml annotation.
func writeChartWith(t *testing.T, dir, name, version, definition string, files map[string]string) string {
	t.Helper()
	chart := filepath.Join(dir, name+"-"+version)
	meta := map[string]any{"apiVersion": "v2", "name": name, "version": version}
	if definition != "" {
		meta["annotations"] = map[string]string{catalogv1.AnnotationChartDefinition: definition}
	}
	raw, err := yaml.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	files = maps.Clone(files)
	files["Chart.yaml"] = string(raw)
	for file, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(chart, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(chart, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return chart
}

// chartDefinition is the definition a chart carries for an app kind whose spec holds its
// replicas (1 to maxReplicas) and the given further properties (JSON Schema, as YAML flow).
func chartDefinition(kind, plural string, maxReplicas int, properties ...string) string {
	return fmt.Sprintf(`apiVersion: catalog.flotilla.dev/v1alpha1
kind: ApplicationDefinition
metadata: {name: %s}
spec:
  names: {kind: %s, plural: %s}
  chart: {sourceRef: {kind: HelmRepository, name: elsewhere, namespace: default}, name: ignored}
  schema:
    type: object
    properties:
      replicas: {type: integer, default: 1, minimum: 1, maximum: %d}
%s`, plural, kind, plural, maxReplicas, strings.Join(append(properties, ""), "\n"))
}

// A partner publishes charts to a Helm repository, each carrying its definition: the newest
// release of each chart (pre-releases aside) is added to the catalog, pointing at itself, and an
// app of it is delivered from that repository.
func TestCatalogSourceFromHelmRepository(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	def := func(maxReplicas int) string { return chartDefinition("Keyval", "keyvals", maxReplicas) }
	charts := []string{
		writeChart(t, dir, "keyval", "0.1.0", def(3)),
		writeChart(t, dir, "keyval", "0.2.0", def(5)),
		writeChart(t, dir, "keyval", "0.3.0-rc.1", def(7)), // a pre-release: not offered
		writeChart(t, dir, "plain", "1.0.0", ""),           // no definition: not an app
	}
	repo, err := testenv.ServeCharts(filepath.Join(dir, "repo"), 0, charts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	helmSource(t, "partner-charts", sourcev1.HelmRepositorySpec{URL: repo.URL})
	src := waitSource(t, "partner-charts", "Ready", "Succeeded")
	if fmt.Sprint(src.Status.Definitions) != "[keyvals]" {
		t.Fatalf("definitions %v", src.Status.Definitions)
	}
	applied := &catalogv1.ApplicationDefinition{}
	if err := kube.Get(ctx, client.ObjectKey{Name: "keyvals"}, applied); err != nil {
		t.Fatal(err)
	}
	want := catalogv1.Chart{SourceRef: catalogv1.SourceReference{Kind: "HelmRepository", Name: "partner-charts", Namespace: catalogNamespace}, Name: "keyval", Version: "0.2.0"}
	if applied.Spec.Chart != want || !strings.Contains(string(applied.Spec.Schema.Raw), `"maximum":5`) {
		t.Fatalf("applied %+v with schema %s; want the chart %+v and its definition", applied.Spec.Chart, applied.Spec.Schema.Raw, want)
	}

	// An app of it is delivered from the partner's repository.
	waitDiscovered(t, "keyvals", true)
	ns := tenantNamespace(t, "partnered")
	if _, err := apps.Resource(schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "keyvals"}).Namespace(ns).
		Create(ctx, appObject("Keyval", ns, "cache", `{"replicas":4}`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", ns, "keyval/cache", "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	cm := &corev1.ConfigMap{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keyval-cache"}, cm); err != nil || cm.Data["replicas"] != "4" || cm.Data["chart"] != "0.2.0" {
		t.Fatalf("the chart's ConfigMap: %v %v", err, cm.Data)
	}

	// An OCI Helm repository has no index to read: the source says so and stalls.
	helmSource(t, "partner-oci", sourcev1.HelmRepositorySpec{URL: "oci://127.0.0.1:1/charts", Type: "oci"})
	if c := apimeta.FindStatusCondition(waitSource(t, "partner-oci", "Stalled", "InvalidSpec").Status.Conditions, "Stalled"); !strings.Contains(c.Message, "has no index") {
		t.Fatalf("stalled with %q", c.Message)
	}
}
