package catalogsource

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Fetcher downloads Flux artifacts (gzipped tarballs from source-controller's storage) and reads
// the ApplicationDefinitions in them, in memory.
type Fetcher struct {
	HTTP *http.Client
	// MaxSize bounds an artifact, compressed and uncompressed.
	MaxSize int64
}

// invalidArtifact is an error in an artifact's content: fetching it again cannot help, a new
// revision of the source can.
type invalidArtifact struct{ error }

func (e invalidArtifact) Unwrap() error { return e.error }

// get downloads the artifact at url, bounded by MaxSize, and checks its sha256 digest.
func (f *Fetcher) get(ctx context.Context, url, digest string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the artifact: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the artifact %s: %s", url, resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, f.MaxSize+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > f.MaxSize {
		return nil, invalidArtifact{fmt.Errorf("the artifact is larger than %d bytes", f.MaxSize)}
	}
	if algo, want, ok := strings.Cut(digest, ":"); ok && algo == "sha256" {
		sum := sha256.Sum256(raw)
		if hex.EncodeToString(sum[:]) != want {
			return nil, fmt.Errorf("the artifact's digest is not %s", digest)
		}
	}
	return raw, nil
}

// Definitions returns the ApplicationDefinitions in the YAML files under dir of the artifact at
// url (a gzipped tarball). Other kinds in the files are an error: a catalog repository holds
// definitions only.
func (f *Fetcher) Definitions(ctx context.Context, url, digest, dir string) ([]*catalogv1.ApplicationDefinition, error) {
	raw, err := f.get(ctx, url, digest)
	if err != nil {
		return nil, err
	}
	defs, err := definitionsIn(raw, f.MaxSize, dir)
	if err != nil {
		return nil, invalidArtifact{err}
	}
	return defs, nil
}

func definitionsIn(raw []byte, maxSize int64, dir string) ([]*catalogv1.ApplicationDefinition, error) {
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("reading the artifact: %w", err)
	}
	dir = strings.Trim(path.Clean("/"+dir), "/")
	var defs []*catalogv1.ApplicationDefinition
	tr := tar.NewReader(io.LimitReader(gz, maxSize))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the artifact: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if hdr.Typeflag != tar.TypeReg || (dir != "" && !strings.HasPrefix(name, dir+"/")) ||
			!(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		found, err := decode(tr, name)
		if err != nil {
			return nil, err
		}
		defs = append(defs, found...)
	}
	return defs, nil
}

func decode(r io.Reader, file string) ([]*catalogv1.ApplicationDefinition, error) {
	dec := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []*catalogv1.ApplicationDefinition
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta runtime.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if meta.APIVersion != catalogv1.GroupVersion.String() || meta.Kind != "ApplicationDefinition" {
			return nil, fmt.Errorf("%s: a %s %s; a catalog source holds only ApplicationDefinitions", file, meta.APIVersion, meta.Kind)
		}
		def := &catalogv1.ApplicationDefinition{}
		if err := yaml.UnmarshalStrict(doc, def); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, def)
	}
}

// helmIndex is the part of a Helm repository index the catalog reads.
type helmIndex struct {
	Entries map[string][]struct {
		Version     string            `json:"version"`
		Annotations map[string]string `json:"annotations"`
	} `json:"entries"`
}

// ChartDefinitions returns the definitions carried by the charts of the Helm repository index
// at url: for each chart, its newest version that is not a pre-release, when that version has
// the catalog.flotilla.dev/definition annotation. Each definition's chart is set to that
// chart and version in repo.
func (f *Fetcher) ChartDefinitions(ctx context.Context, url, digest string, repo catalogv1.SourceReference) ([]*catalogv1.ApplicationDefinition, error) {
	raw, err := f.get(ctx, url, digest)
	if err != nil {
		return nil, err
	}
	defs, err := chartDefinitionsIn(raw, repo)
	if err != nil {
		return nil, invalidArtifact{err}
	}
	return defs, nil
}

func chartDefinitionsIn(raw []byte, repo catalogv1.SourceReference) ([]*catalogv1.ApplicationDefinition, error) {
	var index helmIndex
	if err := yaml.Unmarshal(raw, &index); err != nil {
		return nil, fmt.Errorf("reading the repository index: %w", err)
	}
	var defs []*catalogv1.ApplicationDefinition
	for _, chart := range slices.Sorted(maps.Keys(index.Entries)) {
		var newest *semver.Version
		var version, annotation string
		for _, v := range index.Entries[chart] {
			parsed, err := semver.ParseTolerant(v.Version)
			if err != nil || len(parsed.Pre) > 0 || newest != nil && !parsed.GT(*newest) {
				continue
			}
			newest, version, annotation = &parsed, v.Version, v.Annotations[catalogv1.AnnotationChartDefinition]
		}
		if annotation == "" {
			continue
		}
		file := fmt.Sprintf("chart %s %s", chart, version)
		found, err := decode(strings.NewReader(annotation), file)
		if err != nil {
			return nil, err
		}
		if len(found) != 1 {
			return nil, fmt.Errorf("%s: the %s annotation holds %d definitions, not one", file, catalogv1.AnnotationChartDefinition, len(found))
		}
		found[0].Spec.Chart = catalogv1.Chart{SourceRef: repo, Name: chart, Version: version}
		defs = append(defs, found[0])
	}
	return defs, nil
}
