package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Meta is what every artifact of one release says about itself.
type Meta struct {
	Version  string    // SemVer without a leading v: image tags, chart versions and appVersions
	Revision string    // the commit
	Source   string    // the repository's URL
	Created  time.Time // the commit's time, so that a rebuild gives the same bytes
}

// labels are the OCI labels of an image and the annotations of an artifact: the same keys.
func (m Meta) labels(title string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.version":  m.Version,
		"org.opencontainers.image.revision": m.Revision,
		"org.opencontainers.image.source":   m.Source,
		"org.opencontainers.image.created":  m.Created.UTC().Format(time.RFC3339),
	}
}

// Artifact is one thing of a release, at <registry prefix>/<Repository>:<Tag>.
type Artifact struct {
	Repository string // images: the service; charts/<chart>; catalog/<app>; addons/<add-on>; flux/<tree>
	Tag        string
	Image      v1.Image      // or
	Index      v1.ImageIndex // a multi-platform image
}

// Ref is the artifact's reference under a registry prefix.
func (a Artifact) Ref(prefix string) string { return prefix + "/" + a.Repository + ":" + a.Tag }

// Digest is the digest of the artifact's manifest or index.
func (a Artifact) Digest() (v1.Hash, error) {
	if a.Index != nil {
		return a.Index.Digest()
	}
	return a.Image.Digest()
}

// Bundle is a release's artifacts.
type Bundle struct{ Artifacts []Artifact }

// Options say what to build.
type Options struct {
	Repo      string // the repository's root
	Meta      Meta
	Platforms []v1.Platform
	WorkDir   string    // where binaries are compiled to
	Log       io.Writer // progress
}

// FluxTree and CatalogTree are the repositories of the GitOps tree and the starter catalog.
const (
	FluxTree    = "flux/flotilla"
	CatalogTree = "flux/catalog"
)

// versionPlaceholder is the release version in the GitOps tree's source
// (deploy/flux/flotilla/kustomizations.yaml, the platform Kustomization's substitutions).
var versionPlaceholder = regexp.MustCompile(`(?m)^( +)FLOTILLA_VERSION: "0\.0\.0-dev"$`)

// Build makes every artifact of a release: images first, since the charts name them by digest.
func Build(ctx context.Context, o Options) (*Bundle, error) {
	specs, err := ReadImages(filepath.Join(o.Repo, "deploy", "images.txt"))
	if err != nil {
		return nil, err
	}
	b := &Bundle{}
	digests := map[string]string{}
	for _, spec := range specs {
		images := map[string]v1.Image{}
		for _, p := range o.Platforms {
			dir := filepath.Join(o.WorkDir, p.OS+"-"+p.Architecture+p.Variant, spec.Name)
			for _, bin := range spec.Binaries {
				start := time.Now()
				if err := GoBuild(ctx, o.Repo, bin, p, filepath.Join(dir, filepath.Base(bin.Path))); err != nil {
					return nil, err
				}
				fmt.Fprintf(o.Log, "built %s for %s in %s\n", bin.Package, p.String(), time.Since(start).Round(time.Second))
			}
			if images[p.String()], err = Image(spec, p, dir, o.Meta); err != nil {
				return nil, fmt.Errorf("image %s: %w", spec.Name, err)
			}
		}
		a := Artifact{Repository: spec.Name, Tag: o.Meta.Version, Index: Index(images, o.Platforms, o.Meta.labels(spec.Name))}
		d, err := a.Digest()
		if err != nil {
			return nil, err
		}
		digests[spec.Name] = d.String()
		b.Artifacts = append(b.Artifacts, a)
	}

	charts, _ := filepath.Glob(filepath.Join(o.Repo, "deploy", "charts", "*", "Chart.yaml"))
	for _, c := range charts {
		dir := filepath.Dir(c)
		digest, ok := digests[filepath.Base(dir)]
		if !ok {
			return nil, fmt.Errorf("chart %s: no image of that name in deploy/images.txt", dir)
		}
		if err := b.addChart("charts", dir, ChartChanges{Version: o.Meta.Version, ImageDigest: digest}, o.Meta); err != nil {
			return nil, err
		}
	}
	apps, _ := filepath.Glob(filepath.Join(o.Repo, "deploy", "catalog", "*", "chart", "Chart.yaml"))
	for _, c := range apps {
		ch := ChartChanges{}
		if ch.ImageDigests, err = b.addCatalogImage(ctx, o, filepath.Join(filepath.Dir(filepath.Dir(c)), "image.yaml")); err != nil {
			return nil, err
		}
		if err := b.addChart("catalog", filepath.Dir(c), ch, o.Meta); err != nil {
			return nil, err
		}
	}
	// The operators the catalog's kinds need (CloudNativePG for Postgres): their images, and their
	// manifests in the GitOps tree, running those images by digest from the registry prefix.
	operators := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join(o.Repo, "deploy", "operators", "*", "image.yaml"))
	for _, spec := range files {
		digests, err := b.addCatalogImage(ctx, o, spec)
		if err != nil {
			return nil, err
		}
		s, err := ReadCatalogImageSpec(spec)
		if err != nil {
			return nil, err
		}
		ref := "${FLOTILLA_REGISTRY}/" + CatalogImages + "/" + s.Name + "@" + digests[s.Tag]
		if operators[OperatorsDir+"/"+s.Name+".yaml"], err = OperatorManifests(ctx, o.Repo, filepath.Dir(spec), ref); err != nil {
			return nil, err
		}
	}
	// What the cluster-controller installs in customers' clusters (its --addons-repository).
	addons, _ := filepath.Glob(filepath.Join(o.Repo, "deploy", "addons", "*", "Chart.yaml"))
	for _, c := range addons {
		if err := b.addChart("addons", filepath.Dir(c), ChartChanges{}, o.Meta); err != nil {
			return nil, err
		}
	}

	tree, err := FluxArtifact(filepath.Join(o.Repo, "deploy", "flux"), func(rel string, body []byte) ([]byte, error) {
		if rel != "flotilla/kustomizations.yaml" {
			return body, nil
		}
		return replaceOnce(body, versionPlaceholder, fmt.Sprintf("${1}FLOTILLA_VERSION: %q", o.Meta.Version), "deploy/flux/"+rel)
	}, operators, o.Meta, "flotilla-gitops")
	if err != nil {
		return nil, err
	}
	catalog, err := FluxArtifact(filepath.Join(o.Repo, "deploy", "catalog"), nil, nil, o.Meta, "flotilla-catalog")
	if err != nil {
		return nil, err
	}
	b.Artifacts = append(b.Artifacts,
		Artifact{Repository: FluxTree, Tag: o.Meta.Version, Image: tree},
		Artifact{Repository: CatalogTree, Tag: o.Meta.Version, Image: catalog})
	return b, nil
}

// CatalogImages is where a release puts the catalog apps' images (<prefix>/catalog-images/<app>).
const CatalogImages = "catalog-images"

// BuildCatalogImages builds, as Build does, the image of every catalog app that has one
// (deploy/catalog/*/image.yaml) and of the operators they need (deploy/operators/*/image.yaml),
// and nothing else: what `make demo` puts in its node's registry.
func BuildCatalogImages(ctx context.Context, o Options) (*Bundle, error) {
	b := &Bundle{}
	specs, _ := filepath.Glob(filepath.Join(o.Repo, "deploy", "catalog", "*", "image.yaml"))
	operators, _ := filepath.Glob(filepath.Join(o.Repo, "deploy", "operators", "*", "image.yaml"))
	for _, spec := range append(specs, operators...) {
		if _, err := b.addCatalogImage(ctx, o, spec); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// addCatalogImage builds the image of a catalog app (spec: its image.yaml, if it has one) for
// every platform of the release it can be built for, and returns the digests its chart pins, by
// tag.
func (b *Bundle) addCatalogImage(ctx context.Context, o Options, spec string) (map[string]string, error) {
	if _, err := os.Stat(spec); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	s, err := ReadCatalogImageSpec(spec)
	if err != nil {
		return nil, err
	}
	images := map[string]v1.Image{}
	var platforms []v1.Platform
	for _, p := range o.Platforms {
		img, err := BuildCatalogImage(ctx, o.Repo, s, p, o.WorkDir, o.Meta)
		if errors.Is(err, ErrOtherMachine) {
			fmt.Fprintf(o.Log, "catalog image %s: %s left out: %v\n", s.Name, p.String(), err)
			continue
		}
		if err != nil {
			return nil, err
		}
		images[p.String()] = img
		platforms = append(platforms, p)
	}
	if len(platforms) == 0 {
		return nil, fmt.Errorf("catalog image %s: none of the release's platforms is this machine's (linux/%s)", s.Name, runtime.GOARCH)
	}
	a := Artifact{Repository: CatalogImages + "/" + s.Name, Tag: s.Tag, Index: Index(images, platforms, o.Meta.labels(s.Name))}
	d, err := a.Digest()
	if err != nil {
		return nil, err
	}
	b.Artifacts = append(b.Artifacts, a)
	return map[string]string{s.Tag: d.String()}, nil
}

func (b *Bundle) addChart(under, dir string, ch ChartChanges, m Meta) error {
	tgz, chartJSON, err := PackageChart(dir, ch, m)
	if err != nil {
		return err
	}
	img, err := ChartArtifact(tgz, chartJSON, m)
	if err != nil {
		return err
	}
	mf, err := img.Manifest()
	if err != nil {
		return err
	}
	// Helm's rule: the tag is the chart's version, with "+" (not allowed in a tag) as "_".
	title := mf.Annotations["org.opencontainers.image.title"]
	version := strings.ReplaceAll(mf.Annotations["org.opencontainers.image.version"], "+", "_")
	b.Artifacts = append(b.Artifacts, Artifact{Repository: under + "/" + title, Tag: version, Image: img})
	return nil
}

// RefName is the annotation naming an artifact in an OCI image layout.
const RefName = "org.opencontainers.image.ref.name"

// WriteLayout writes the bundle as one OCI image layout: its index.json lists every artifact
// with its digest and, in RefName, its <repository>:<tag>.
func (b *Bundle) WriteLayout(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, a := range b.Artifacts {
		opt := layout.WithAnnotations(map[string]string{RefName: a.Repository + ":" + a.Tag})
		if a.Index != nil {
			err = p.AppendIndex(a.Index, opt)
		} else {
			err = p.AppendImage(a.Image, opt)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a.Repository, err)
		}
	}
	return nil
}

// ReadLayout reads a bundle WriteLayout wrote.
func ReadLayout(dir string) (*Bundle, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	b := &Bundle{}
	for _, d := range im.Manifests {
		repo, tag, ok := strings.Cut(d.Annotations[RefName], ":")
		if !ok {
			return nil, fmt.Errorf("%s: manifest %s has no %s", dir, d.Digest, RefName)
		}
		a := Artifact{Repository: repo, Tag: tag}
		if d.MediaType == types.OCIImageIndex || d.MediaType == types.DockerManifestList {
			a.Index, err = idx.ImageIndex(d.Digest)
		} else {
			a.Image, err = idx.Image(d.Digest)
		}
		if err != nil {
			return nil, err
		}
		b.Artifacts = append(b.Artifacts, a)
	}
	return b, nil
}

// Push copies the bundle to a registry under prefix (host[:port]/path). insecure allows plain
// HTTP, for a registry on loopback.
func (b *Bundle) Push(ctx context.Context, prefix string, insecure bool, log io.Writer, opts ...remote.Option) error {
	var nameOpts []name.Option
	if insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	opts = append(opts, remote.WithContext(ctx))
	for _, a := range b.Artifacts {
		ref, err := name.ParseReference(a.Ref(prefix), nameOpts...)
		if err != nil {
			return err
		}
		if a.Index != nil {
			err = remote.WriteIndex(ref, a.Index, opts...)
		} else {
			err = remote.Write(ref, a.Image, opts...)
		}
		if err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		d, _ := a.Digest()
		fmt.Fprintf(log, "pushed %s@%s\n", ref, d)
	}
	return nil
}
