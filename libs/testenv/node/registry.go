package node

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// registryConfig: the CNCF distribution registry, storing on disk under the node's directory (a
// restarted demo keeps its images), listening on the machine's end of the node's link.
const registryConfig = `version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
`

func (n *Node) startRegistry(bin string) error {
	config := filepath.Join(n.Dir, "registry.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, registryConfig, filepath.Join(n.Dir, "registry"), n.Registry), 0o644); err != nil {
		return err
	}
	p, err := testenv.StartLogged(filepath.Join(bin, "registry"), filepath.Join(n.Dir, "logs", "registry.log"),
		[]string{"OTEL_TRACES_EXPORTER=none"}, "serve", config) // distribution exports traces to localhost by default
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return waitFor(context.Background(), "the registry", filepath.Join(n.Dir, "logs", "registry.log"), 30*time.Second, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + n.Registry + "/v2/")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// Platform is the node's platform.
var Platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// NonRoot is the user the node's images run as, unless a pod says otherwise.
const NonRoot = 65532

// Image is a one-layer image of files (path in the image → file on this machine, executable),
// running the first as NonRoot. Every header and time is fixed, so that the same files give the
// same digest (a restarted demo pushes nothing new).
func Image(files map[string]string, entrypoint string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, path := range slices.Sorted(maps.Keys(files)) {
		body, err := os.ReadFile(files[path])
		if err != nil {
			return nil, err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(body)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created, cf.History = Platform.OS, Platform.Architecture, v1.Time{}, nil
	cf.Config = v1.Config{Entrypoint: []string{entrypoint}, User: fmt.Sprintf("%d:%d", NonRoot, NonRoot), WorkingDir: "/"}
	return mutate.ConfigFile(img, cf)
}

// PushImage pushes Image(files, entrypoint) to the node's registry as flotilla/<repo> and returns
// its reference by digest.
func (n *Node) PushImage(ctx context.Context, repo string, files map[string]string, entrypoint string) (string, error) {
	img, err := Image(files, entrypoint)
	if err != nil {
		return "", err
	}
	return n.Push(ctx, "flotilla/"+repo, img)
}

// Push pushes img to the node's registry as repo and returns its reference by digest.
func (n *Node) Push(ctx context.Context, repo string, img v1.Image) (string, error) {
	ref, err := name.ParseReference(n.Registry+"/"+repo+":latest", name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Digest(digest.String()).String(), nil
}

// PushProgram builds the Go program in dir (a path from the repository's root) and pushes it as
// the image flotilla/<name> with the program as /<name>, returning its reference by digest.
func (n *Node) PushProgram(ctx context.Context, name, dir string) (string, error) {
	src, err := testenv.RepoPath(dir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(n.Dir, "images", name)
	if err := testenv.BuildProgram(ctx, src, ".", out); err != nil {
		return "", err
	}
	return n.PushImage(ctx, name, map[string]string{"/" + name: out}, "/"+name)
}

// pushNodeImages builds and pushes what the node itself runs: the pods' sandbox (pause, built from
// this repository) and CoreDNS (from the builder's cache).
func (n *Node) pushNodeImages(ctx context.Context, bin string) (map[string]string, error) {
	pause, err := n.PushProgram(ctx, "pause", "libs/testenv/node/pause")
	if err != nil {
		return nil, err
	}
	coredns, err := n.PushImage(ctx, "coredns", map[string]string{"/coredns": filepath.Join(bin, "coredns")}, "/coredns")
	if err != nil {
		return nil, err
	}
	return map[string]string{"pause": pause, "coredns": coredns}, nil
}
