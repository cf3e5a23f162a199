package release

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The catalog's Redis image, from Debian's packages: the programs with every library they load
// (down to the dynamic loader), the links the chart's script uses, run as uid 999; the same
// packages give the same digest, and a library whose package is not listed is named.
func TestDebImage(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("fetching Debian's packages needs apt-get (a Debian machine, as CI is)")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadDebImageSpec(filepath.Join(repo, "deploy", "catalog", "redis", "image.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root, err := FetchDebs(ctx, repo, spec)
	if err != nil {
		t.Fatal(err)
	}
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	m := Meta{Version: "1.0.0", Revision: "test", Source: "https://example.org/flotilla", Created: time.Unix(1_700_000_000, 0).UTC()}
	img, err := DebImage(spec, root, p, m)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DebImage(spec, root, p, m)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("the same packages gave %s, then %s", d1, d2)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "999:999" || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/bin/redis-server"}) {
		t.Errorf("user %q, entrypoint %v", cf.Config.User, cf.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
	for name, want := range map[string]byte{
		"/usr/bin/redis-server":    tar.TypeSymlink, // Debian's links it to redis-check-rdb
		"/usr/bin/redis-check-rdb": tar.TypeReg,
		"/usr/bin/redis-cli":       tar.TypeReg,
		"/bin/sh":                  tar.TypeSymlink,
		"/bin/busybox":             tar.TypeReg,
		"/usr/lib":                 tar.TypeDir,
	} {
		if h := files[name]; h == nil || h.Typeflag != want {
			t.Errorf("%s: %v, want type %c", name, h, want)
		}
	}
	var libs []string
	for name := range files {
		if strings.Contains(name, ".so") {
			libs = append(libs, filepath.Base(name))
		}
	}
	for _, lib := range []string{"libc.so.6", "libjemalloc.so.2", "libssl.so.3", "libzstd.so.1"} {
		if !slices.Contains(libs, lib) {
			t.Errorf("no %s among the libraries %v", lib, libs)
		}
	}
	for name := range files {
		if strings.HasPrefix(name, "/usr/share/doc") || strings.HasPrefix(name, "/etc/init.d") || strings.HasSuffix(name, "redis-benchmark") {
			t.Errorf("%s is in the image: only what the programs need belongs there", name)
		}
	}

	spec.Packages = slices.DeleteFunc(spec.Packages, func(p string) bool { return p == "libjemalloc2" })
	if root, err = FetchDebs(ctx, repo, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := DebImage(spec, root, p, m); err == nil || !strings.Contains(err.Error(), "libjemalloc.so.2") {
		t.Errorf("a library's package missing: %v, want an error naming libjemalloc.so.2", err)
	}
}
