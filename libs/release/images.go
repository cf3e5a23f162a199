package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// ImageSpec is one container image of deploy/images.txt.
type ImageSpec struct {
	Name     string
	Binaries []Binary // the first is the entrypoint
}

// Binary is a Go main package and where it goes in the image.
type Binary struct {
	Path    string // absolute, in the image
	Package string // relative to the repository root
}

// NonRoot is the user and group every image runs as (the distroless "nonroot" user).
const NonRoot = 65532

// ReadImages parses deploy/images.txt: "image path package" per line, # comments.
func ReadImages(file string) ([]ImageSpec, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var specs []ImageSpec
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || !strings.HasPrefix(f[1], "/") {
			return nil, fmt.Errorf("%s:%d: want \"image /path ./package\", got %q", file, n, line)
		}
		i := slices.IndexFunc(specs, func(s ImageSpec) bool { return s.Name == f[0] })
		if i < 0 {
			specs = append(specs, ImageSpec{Name: f[0]})
			i = len(specs) - 1
		}
		specs[i].Binaries = append(specs[i].Binaries, Binary{Path: f[1], Package: f[2]})
	}
	return specs, sc.Err()
}

// GoBuild compiles a binary reproducibly for a platform: static, no paths, no build ID, no VCS
// stamp (the tree's state must not change the bytes; the revision is in the image's labels).
func GoBuild(ctx context.Context, repo string, b Binary, p v1.Platform, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, b.Package)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", b.Package, p.String(), err, msg)
	}
	return nil
}

// Image assembles one platform's image of spec from binaries already built into binDir (named
// after their path in the image): a base layer (CA certificates, the non-root user) and a layer
// of the binaries.
func Image(spec ImageSpec, p v1.Platform, binDir string, m Meta) (v1.Image, error) {
	files := &tarWriter{created: m.Created}
	for _, b := range spec.Binaries {
		bin, err := os.ReadFile(filepath.Join(binDir, filepath.Base(b.Path)))
		if err != nil {
			return nil, err
		}
		files.file(b.Path, 0o755, bin)
	}
	return baseAnd(files, spec.Name+" binaries", p, m, v1.Config{
		Entrypoint: []string{spec.Binaries[0].Path},
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		WorkingDir: "/",
		Env:        []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     m.labels(spec.Name),
	})
}

// baseAnd is a platform's image of the base layer and a layer of files (what says what they are),
// with config c.
func baseAnd(files *tarWriter, what string, p v1.Platform, m Meta, c v1.Config) (v1.Image, error) {
	base, err := baseLayer(m.Created)
	if err != nil {
		return nil, err
	}
	layer, err := files.layer()
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "flotilla release: CA certificates, user nonroot"}},
		mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "flotilla release: " + what}},
	); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: m.Created}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = c
	return mutate.ConfigFile(img, cf)
}

// Index joins the platforms' images of one service into a multi-platform image index.
func Index(images map[string]v1.Image, platforms []v1.Platform, annotations map[string]string) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img := images[p.String()]
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.Annotations(idx, annotations).(v1.ImageIndex)
}

// baseLayer holds what a static Go binary needs from a distribution: the Mozilla root
// certificates (from golang.org/x/crypto/x509roots/fallback, pinned by go.sum, so every build
// has the same bytes) and /etc/passwd and /etc/group naming the non-root user.
// The users every image names: root and nonroot (NonRoot).
var (
	basePasswd = fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	baseGroup  = fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
)

func baseLayer(created time.Time) (v1.Layer, error) {
	var certs bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue // a root with a distrust date cannot be expressed in a PEM bundle: leave it out
		}
		if _, err := x509.ParseCertificate(root.Certificate); err != nil {
			return nil, err
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	t := &tarWriter{created: created}
	t.dir("/etc", 0o755)
	t.file("/etc/passwd", 0o644, []byte(basePasswd))
	t.file("/etc/group", 0o644, []byte(baseGroup))
	t.dir("/etc/ssl", 0o755)
	t.dir("/etc/ssl/certs", 0o755)
	t.file("/etc/ssl/certs/ca-certificates.crt", 0o644, certs.Bytes())
	t.dirOwned("/home/nonroot", 0o700, NonRoot)
	t.dir("/tmp", 0o1777)
	return t.layer()
}

// tarWriter writes a layer's tar with every header fixed: owner root (unless said), mtime created.
type tarWriter struct {
	buf     bytes.Buffer
	w       *tar.Writer
	created time.Time
	err     error
}

func (t *tarWriter) header(h *tar.Header, body []byte) {
	if t.w == nil {
		t.w = tar.NewWriter(&t.buf)
	}
	if t.err != nil {
		return
	}
	h.Name = strings.TrimPrefix(h.Name, "/")
	h.ModTime, h.Format = t.created, tar.FormatPAX
	if t.err = t.w.WriteHeader(h); t.err == nil && body != nil {
		_, t.err = t.w.Write(body)
	}
}

func (t *tarWriter) file(name string, mode int64, body []byte) {
	t.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body)
}

func (t *tarWriter) dir(name string, mode int64) { t.dirOwned(name, mode, 0) }

func (t *tarWriter) dirOwned(name string, mode int64, id int) {
	t.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: id, Gid: id}, nil)
}

// bytes ends the tar and returns it.
func (t *tarWriter) bytes() ([]byte, error) {
	if t.err == nil {
		t.err = t.w.Close()
	}
	return t.buf.Bytes(), t.err
}

// layer gzips the tar into an OCI layer.
func (t *tarWriter) layer() (v1.Layer, error) {
	raw, err := t.bytes()
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
}
