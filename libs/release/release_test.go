package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/oci"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

// A small repository of the shape Build reads: one service with two binaries, its chart, a
// GitOps tree with the version placeholder and a catalog with one app chart.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                        "module example.org/svc\n\ngo 1.26\n",
		"svc/cmd/main.go":               "package main\n\nfunc main() { println(\"svc\") }\n",
		"svc/cmd/agent/main.go":         "package main\n\nfunc main() { println(\"agent\") }\n",
		"deploy/images.txt":             "# image path package\nsvc /svc ./svc/cmd\nsvc /svc-agent ./svc/cmd/agent\n",
		"deploy/charts/svc/Chart.yaml":  "apiVersion: v2\nname: svc\ndescription: a service\nversion: 0.1.0\nappVersion: \"0.1.0\"\n",
		"deploy/charts/svc/values.yaml": "image:\n  repository: ghcr.io/example/svc\n  tag: \"\"\n  digest: \"\"         # set by a release\n",
		"deploy/charts/svc/templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: svc}
spec:
  selector: {matchLabels: {app: svc}}
  template:
    metadata: {labels: {app: svc}}
    spec:
      containers:
        - name: svc
          image: "{{ .Values.image.repository }}@{{ .Values.image.digest }}"
`,
		"deploy/flux/flotilla/kustomizations.yaml": "spec:\n  postBuild:\n    substitute:\n      FLOTILLA_VERSION: \"0.0.0-dev\"\n",
		"deploy/flux/platform/svc.yaml":            "kind: HelmRelease\n",
		"deploy/catalog/kustomization.yaml":        "resources: []\n",
		"deploy/catalog/app/chart/Chart.yaml":      "apiVersion: v2\nname: app\nversion: 0.3.1\n",
		"deploy/catalog/app/chart/values.yaml":     "replicas: 1\n",
		"deploy/catalog/app/chart/templates/x.md":  "not a manifest\n",
		"deploy/addons/cni/Chart.yaml":             "apiVersion: v2\nname: cni\nversion: 0.1.0\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var (
	meta      = Meta{Version: "1.2.3", Revision: "abc", Source: "https://example.org/flotilla", Created: time.Unix(1_700_000_000, 0).UTC()}
	platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
)

func build(t *testing.T, repo string) *Bundle {
	t.Helper()
	b, err := Build(context.Background(), Options{Repo: repo, Meta: meta, Platforms: platforms, WorkDir: t.TempDir(), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func digests(t *testing.T, b *Bundle) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range b.Artifacts {
		d, err := a.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out[a.Repository+":"+a.Tag] = d.String()
	}
	return out
}

// Two builds of one source, in different places, give the same digests; a build of a changed
// source does not.
func TestReproducible(t *testing.T) {
	first := digests(t, build(t, fixture(t)))
	want := []string{"svc:1.2.3", "charts/svc:1.2.3", "catalog/app:0.3.1", "addons/cni:0.1.0", FluxTree + ":1.2.3", CatalogTree + ":1.2.3"}
	if len(first) != len(want) {
		t.Errorf("artifacts %v, want %v", first, want)
	}
	for _, w := range want {
		if first[w] == "" {
			t.Errorf("no artifact %s in %v", w, first)
		}
	}
	again := digests(t, build(t, fixture(t)))
	for ref, d := range first {
		if again[ref] != d {
			t.Errorf("%s: %s, then %s: the build is not reproducible", ref, d, again[ref])
		}
	}
	changed := fixture(t)
	if err := os.WriteFile(filepath.Join(changed, "svc/cmd/main.go"), []byte("package main\n\nfunc main() { println(\"v2\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d := digests(t, build(t, changed)); d["svc:1.2.3"] == first["svc:1.2.3"] {
		t.Error("a changed binary gave the same image digest")
	}
}

// Each platform's image runs its first binary as the non-root user, holds the CA certificates and
// every binary for its own architecture, and says where it came from.
func TestImage(t *testing.T) {
	b := build(t, fixture(t))
	idx := b.Artifacts[0].Index
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(platforms) {
		t.Fatalf("index has %d manifests, want one per platform", len(im.Manifests))
	}
	for i, d := range im.Manifests {
		if d.Platform == nil || d.Platform.Architecture != platforms[i].Architecture {
			t.Errorf("manifest %d: platform %v, want %v", i, d.Platform, platforms[i])
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != platforms[i].Architecture || cf.OS != "linux" {
			t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/svc" {
			t.Errorf("user %q entrypoint %v: want 65532:65532 and [/svc]", cf.Config.User, cf.Config.Entrypoint)
		}
		for k, v := range map[string]string{"org.opencontainers.image.revision": "abc", "org.opencontainers.image.version": "1.2.3", "org.opencontainers.image.source": meta.Source} {
			if cf.Config.Labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
			}
		}
		files := flatten(t, img)
		pool := x509.NewCertPool()
		if len(files["etc/ssl/certs/ca-certificates.crt"]) < 100_000 || !pool.AppendCertsFromPEM(files["etc/ssl/certs/ca-certificates.crt"]) {
			t.Error("no usable CA bundle at /etc/ssl/certs/ca-certificates.crt")
		}
		if !bytes.Contains(files["etc/passwd"], []byte("nonroot:x:65532:65532:")) {
			t.Errorf("/etc/passwd has no nonroot user: %s", files["etc/passwd"])
		}
		for _, bin := range []string{"svc", "svc-agent"} {
			machine := map[string][]byte{"amd64": {0x3e, 0x00}, "arm64": {0xb7, 0x00}}[platforms[i].Architecture]
			elf := files[bin]
			if len(elf) < 20 || !bytes.HasPrefix(elf, []byte("\x7fELF")) || !bytes.Equal(elf[18:20], machine) {
				t.Errorf("/%s is not a linux/%s executable", bin, platforms[i].Architecture)
			}
		}
	}
}

// flatten returns the files of the image's (gzip tar) layers by path.
func flatten(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, e := range entries(t, img) {
		out[name] = e.body
	}
	return out
}

// entry is a tar entry of an image's layer: its header and, for a file, its content.
type entry struct {
	*tar.Header
	body []byte
}

// entries returns the entries of the image's (gzip tar) layers by path, a later layer's winning.
func entries(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(rc)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(tr)
			out[h.Name] = entry{h, body}
		}
		rc.Close()
	}
	return out
}

// The chart artifact is what Helm itself reads: `helm show chart` and `helm template` of the
// archive (the real helm, from libs/builder) give the release's version and the image by digest.
func TestChartIsHelms(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm not on PATH (make test builds it)")
	}
	b := build(t, fixture(t))
	var chart, image Artifact
	for _, a := range b.Artifacts {
		switch a.Repository {
		case "charts/svc":
			chart = a
		case "svc":
			image = a
		}
	}
	mf, err := chart.Image.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if mf.Config.MediaType != HelmConfigMediaType || len(mf.Layers) != 1 || mf.Layers[0].MediaType != HelmContentMediaType {
		t.Fatalf("manifest %+v is not a Helm chart's", mf)
	}
	layers, _ := chart.Image.Layers()
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	tgz, _ := io.ReadAll(rc)
	path := filepath.Join(t.TempDir(), "svc-1.2.3.tgz")
	if err := os.WriteFile(path, tgz, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helm, "show", "chart", path).CombinedOutput()
	if err != nil {
		t.Fatalf("helm show chart: %v\n%s", err, out)
	}
	var c struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(out, &c); err != nil || c.Version != "1.2.3" || c.AppVersion != "1.2.3" {
		t.Errorf("helm show chart: version %q appVersion %q, want 1.2.3 (%v)", c.Version, c.AppVersion, err)
	}
	out, err = exec.Command(helm, "template", "x", path).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	d, _ := image.Digest()
	if want := "ghcr.io/example/svc@" + d.String(); !strings.Contains(string(out), want) {
		t.Errorf("helm template names no %s:\n%s", want, out)
	}
	cfg, _ := chart.Image.RawConfigFile()
	var meta map[string]any
	if err := json.Unmarshal(cfg, &meta); err != nil || meta["name"] != "svc" || meta["version"] != "1.2.3" {
		t.Errorf("chart config %s", cfg)
	}
}

// The GitOps tree is a Flux artifact with the release's version written in.
func TestFluxArtifact(t *testing.T) {
	b := build(t, fixture(t))
	for _, a := range b.Artifacts {
		if a.Repository != FluxTree {
			continue
		}
		mf, _ := a.Image.Manifest()
		if mf.Config.MediaType != oci.CanonicalConfigMediaType || mf.Layers[0].MediaType != oci.CanonicalContentMediaType {
			t.Fatalf("manifest %+v is not a Flux artifact's", mf)
		}
		if mf.Annotations[oci.RevisionAnnotation] != "abc" {
			t.Errorf("annotations %v", mf.Annotations)
		}
		files := flatten(t, a.Image) // a gzip tar, like an image layer
		if got := string(files["flotilla/kustomizations.yaml"]); !strings.Contains(got, `      FLOTILLA_VERSION: "1.2.3"`) {
			t.Errorf("flotilla/kustomizations.yaml in the artifact:\n%s", got)
		}
		return
	}
	t.Fatal("no GitOps artifact")
}

// A bundle written as an OCI layout reads back with the same digests.
func TestLayoutRoundTrip(t *testing.T) {
	b := build(t, fixture(t))
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := b.WriteLayout(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, got := digests(t, b), digests(t, back)
	if len(got) != len(want) {
		t.Fatalf("read back %v, wrote %v", got, want)
	}
	for ref, d := range want {
		if got[ref] != d {
			t.Errorf("%s: wrote %s, read back %s", ref, d, got[ref])
		}
	}
}
