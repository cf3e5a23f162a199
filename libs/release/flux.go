package release

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluxcd/pkg/oci"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// FluxArtifact is the directory dir as the OCI artifact an OCIRepository reads (what `flux push
// artifact` makes): fluxcd/pkg/oci's archive of it, with rewrite applied to its files first
// (nil: none) and the files of add (by slash-separated path) added.
func FluxArtifact(dir string, rewrite func(rel string, body []byte) ([]byte, error), add map[string][]byte, m Meta, title string) (v1.Image, error) {
	stage, err := os.MkdirTemp("", "flotilla-flux-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	src := filepath.Join(stage, "src")
	if err := os.CopyFS(src, os.DirFS(dir)); err != nil {
		return nil, err
	}
	for rel, body := range add {
		path := filepath.Join(src, filepath.FromSlash(rel))
		if _, err := os.Stat(path); err == nil {
			return nil, fmt.Errorf("%s: already in %s", rel, dir)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return nil, err
		}
	}
	// The archive keeps modes: make them the same on every machine, whatever its umask.
	err = filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if err == nil {
				err = os.Chmod(path, 0o755)
			}
			return err
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rewrite != nil {
			rel, _ := filepath.Rel(src, path)
			if body, err = rewrite(filepath.ToSlash(rel), body); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return err
		}
		return os.Chmod(path, 0o644)
	})
	if err != nil {
		return nil, err
	}
	archive := filepath.Join(stage, "artifact.tgz")
	if err := oci.NewClient(nil).Build(archive, src, nil); err != nil {
		return nil, fmt.Errorf("archiving %s: %w", dir, err)
	}
	tgz, err := os.ReadFile(archive)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, oci.CanonicalConfigMediaType)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf.Created = v1.Time{Time: m.Created}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	img = mutate.Annotations(img, m.labels(title)).(v1.Image)
	return mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(tgz, oci.CanonicalContentMediaType)})
}
