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
	"net/http"
	"path"
	"strings"

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

// Definitions returns the ApplicationDefinitions in the YAML files under dir of the artifact at
// url, after checking its sha256 digest. Other kinds in the files are an error: a catalog
// repository holds definitions only.
func (f *Fetcher) Definitions(ctx context.Context, url, digest, dir string) ([]*catalogv1.ApplicationDefinition, error) {
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
		return nil, fmt.Errorf("the artifact is larger than %d bytes", f.MaxSize)
	}
	if algo, want, ok := strings.Cut(digest, ":"); ok && algo == "sha256" {
		sum := sha256.Sum256(raw)
		if hex.EncodeToString(sum[:]) != want {
			return nil, fmt.Errorf("the artifact's digest is not %s", digest)
		}
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("reading the artifact: %w", err)
	}
	dir = strings.Trim(path.Clean("/"+dir), "/")
	var defs []*catalogv1.ApplicationDefinition
	tr := tar.NewReader(io.LimitReader(gz, f.MaxSize))
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
