package release

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The media types of a chart stored in an OCI registry, as Helm defines them.
const (
	HelmConfigMediaType  types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmContentMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ChartChanges are what a release writes into a chart: its version and appVersion, and the
// digest of its image (values.yaml's `image.digest`, which the templates prefer to the tag), or,
// for a catalog app's chart, of its images by tag (values.yaml's `flotilla.imageDigests`).
type ChartChanges struct {
	Version      string            // SemVer, without a leading v
	ImageDigest  string            // "" leaves values.yaml as it is
	ImageDigests map[string]string // tag → digest; nil leaves values.yaml as it is
}

var (
	chartVersion = regexp.MustCompile(`(?m)^version: .*$`)
	appVersion   = regexp.MustCompile(`(?m)^appVersion: .*$`)
	imageDigest  = regexp.MustCompile(`(?m)^  digest: ""(\s*#.*)?$`)
	imageDigests = regexp.MustCompile(`(?m)^  imageDigests: \{\}(\s*#.*)?$`)
)

// PackageChart archives the chart in dir as `helm package` does (every file under <name>/), with
// the changes applied and every header fixed, and returns the archive and Chart.yaml as JSON.
func PackageChart(dir string, ch ChartChanges, m Meta) (tgz, chartJSON []byte, err error) {
	chartYAML, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var meta struct {
		Name string `json:"name"`
	}
	if err := yaml.Unmarshal(chartYAML, &meta); err != nil || meta.Name == "" {
		return nil, nil, fmt.Errorf("%s/Chart.yaml: no name (%v)", dir, err)
	}
	if ch.Version != "" {
		if chartYAML, err = replaceOnce(chartYAML, chartVersion, "version: "+ch.Version, dir+"/Chart.yaml"); err != nil {
			return nil, nil, err
		}
		if chartYAML, err = replaceOnce(chartYAML, appVersion, fmt.Sprintf("appVersion: %q", ch.Version), dir+"/Chart.yaml"); err != nil {
			return nil, nil, err
		}
	}
	t := &tarWriter{created: m.Created}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch rel {
		case "Chart.yaml":
			body = chartYAML
		case "values.yaml":
			if ch.ImageDigest != "" {
				if body, err = replaceOnce(body, imageDigest, fmt.Sprintf("  digest: %q", ch.ImageDigest), path); err != nil {
					return err
				}
			}
			if ch.ImageDigests != nil {
				digests, _ := json.Marshal(ch.ImageDigests) // a YAML flow mapping, keys sorted
				if body, err = replaceOnce(body, imageDigests, "  imageDigests: "+string(digests), path); err != nil {
					return err
				}
			}
		}
		t.file(meta.Name+"/"+filepath.ToSlash(rel), 0o644, body)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	raw, err := t.bytes()
	if err != nil {
		return nil, nil, err
	}
	if tgz, err = gzipped(raw); err != nil {
		return nil, nil, err
	}
	chartJSON, err = yaml.YAMLToJSON(chartYAML)
	return tgz, chartJSON, err
}

func replaceOnce(in []byte, re *regexp.Regexp, with, where string) ([]byte, error) {
	if n := len(re.FindAll(in, -1)); n != 1 {
		return nil, fmt.Errorf("%s: want one line matching %s, found %d", where, re, n)
	}
	return re.ReplaceAll(in, []byte(with)), nil
}

func gzipped(raw []byte) ([]byte, error) {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out) // no name, no mtime: the same bytes every time
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	err := zw.Close()
	return out.Bytes(), err
}

// ChartArtifact is the OCI artifact Helm pushes for a chart: its metadata as the config, the
// archive as the one layer.
func ChartArtifact(tgz, chartJSON []byte, m Meta) (v1.Image, error) {
	var c struct{ Name, Version, Description string }
	if err := json.Unmarshal(chartJSON, &c); err != nil {
		return nil, err
	}
	ann := m.labels(c.Name)
	ann["org.opencontainers.image.version"] = c.Version
	if c.Description != "" {
		ann["org.opencontainers.image.description"] = c.Description
	}
	return rawArtifact(HelmConfigMediaType, chartJSON, static.NewLayer(tgz, HelmContentMediaType), ann)
}

// rawArtifact is an OCI manifest whose config is not an image configuration (charts, and any
// artifact a tool other than a container runtime reads).
func rawArtifact(configType types.MediaType, config []byte, layer v1.Layer, annotations map[string]string) (v1.Image, error) {
	digest, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	size, err := layer.Size()
	if err != nil {
		return nil, err
	}
	mt, err := layer.MediaType()
	if err != nil {
		return nil, err
	}
	cfgDigest, cfgSize, err := v1.SHA256(bytes.NewReader(config))
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: configType, Digest: cfgDigest, Size: cfgSize},
		Layers:        []v1.Descriptor{{MediaType: mt, Digest: digest, Size: size}},
		Annotations:   annotations,
	})
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: manifest, config: config, layer: layer})
}

type artifact struct {
	manifest, config []byte
	layer            v1.Layer
}

func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _ := a.layer.Digest(); d == h {
		return a.layer, nil
	}
	if d, _, _ := v1.SHA256(bytes.NewReader(a.config)); d == h {
		return static.NewLayer(a.config, types.MediaType("application/octet-stream")), nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}
