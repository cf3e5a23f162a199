package release

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
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
func TestCatalogImageOfDebianPackages(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("fetching Debian's packages needs apt-get (a Debian machine, as CI is)")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadCatalogImageSpec(filepath.Join(repo, "deploy", "catalog", "redis", "image.yaml"))
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
	img, err := CatalogImage(spec, root, "", p, m)
	if err != nil {
		t.Fatal(err)
	}
	again, err := CatalogImage(spec, root, "", p, m)
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
	files := map[string]*tar.Header{}
	for name, e := range entries(t, img) {
		files["/"+strings.TrimSuffix(name, "/")] = e.Header
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
	if _, err := CatalogImage(spec, root, "", p, m); err == nil || !strings.Contains(err.Error(), "libjemalloc.so.2") {
		t.Errorf("a library's package missing: %v, want an error naming libjemalloc.so.2", err)
	}
}

// A release pins each catalog chart's image by digest: every image the chart renders, as the
// release packages it, is <the platform's registry>/catalog-images/<app>:<tag>@<digest> for the tag
// its image.yaml builds (the tag kept: CloudNativePG reads PostgreSQL's version from it).
func TestCatalogChartsPinTheirImages(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm not on PATH (make test builds it)")
	}
	specs, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "catalog", "*", "image.yaml"))
	if len(specs) == 0 {
		t.Fatal("no deploy/catalog/*/image.yaml")
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, file := range specs {
		spec, err := ReadCatalogImageSpec(file)
		if err != nil {
			t.Fatal(err)
		}
		tgz, _, err := PackageChart(filepath.Join(filepath.Dir(file), "chart"),
			ChartChanges{ImageDigests: map[string]string{spec.Tag: digest}}, Meta{Created: time.Unix(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), spec.Name+".tgz")
		if err := os.WriteFile(path, tgz, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(helm, "template", "app", path, "--namespace", "tenant-acme",
			"--set-json", `flotilla={"registry":"mirror.example/flotilla"}`).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template %s: %v\n%s", spec.Name, err, out)
		}
		want, images := "mirror.example/flotilla/"+CatalogImages+"/"+spec.Name+":"+spec.Tag+"@"+digest, 0
		for line := range strings.Lines(string(out)) {
			// A Pod's image, or the image of an operator's kind (CloudNativePG's Cluster: imageName).
			line = strings.TrimSpace(line)
			image, ok := strings.CutPrefix(line, "image: ")
			if !ok {
				image, ok = strings.CutPrefix(line, "imageName: ")
			}
			if ok {
				images++
				if strings.Trim(image, `"`) != want {
					t.Errorf("%s's chart renders image %s, want %s", spec.Name, image, want)
				}
			}
		}
		if images == 0 {
			t.Errorf("%s's chart renders no image", spec.Name)
		}
	}
}

// The catalog's etcd image, from the Go modules the builder pins: etcd and etcdctl built for the
// platform, static, and nothing else but the base layer; run as the non-root user.
func TestCatalogImageOfTools(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadCatalogImageSpec(filepath.Join(repo, "deploy", "catalog", "etcd", "image.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	img, err := BuildCatalogImage(context.Background(), repo, spec, p, t.TempDir(), Meta{Created: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Architecture != runtime.GOARCH {
		t.Errorf("user %q, architecture %q", cf.Config.User, cf.Architecture)
	}
	var files []string
	for name, e := range entries(t, img) {
		if e.Typeflag != tar.TypeReg || strings.HasPrefix(name, "etc/") { // the base layer's
			continue
		}
		files = append(files, "/"+name)
		if needed, interp, err := elfNeeds(bytes.NewReader(e.body)); err != nil || interp != "" || len(needed) > 0 {
			t.Errorf("%s: interpreter %q, libraries %v (%v): want a static program", name, interp, needed, err)
		}
	}
	slices.Sort(files)
	if want := []string{"/usr/local/bin/etcd", "/usr/local/bin/etcdctl"}; !slices.Equal(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}
}

// A tree is kept whole, empty files and links to directories too, but for what the spec excludes;
// a link may name the platform's architecture; a named user is in the image's /etc/passwd and
// /etc/group beside the base layer's.
func TestCatalogImageTreesAndUserName(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"/usr/bin/tool":                   "#!/bin/sh\n",
		"/usr/share/tool/catalog_version": "",
		"/usr/share/tool/data.sql":        "select 1;\n",
		"/usr/share/tool/jit/plugin.so":   "\x7fELF not really",
		"/usr/share/tool/jit.so":          "\x7fELF not really",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("jit", filepath.Join(root, "usr/share/tool/plugins")); err != nil { // a directory's link
		t.Fatal(err)
	}
	spec := CatalogImageSpec{Name: "tool", Tag: "1", Packages: []string{"tool"}, Programs: []string{"/usr/bin/tool"},
		Trees: []string{"/usr/share/tool"}, Exclude: []string{"/usr/share/tool/jit", "/usr/share/tool/jit.so"},
		Links: map[string]string{"/opt/tool_{arch}": "/usr/bin/tool"}, User: 26, UserName: "postgres", Entrypoint: []string{"/usr/bin/tool"}}
	img, err := CatalogImage(spec, root, "", v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, Meta{Created: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	passwd, group, links := "", "", 0
	for name, e := range entries(t, img) {
		switch {
		case name == "etc/passwd":
			passwd = string(e.body)
		case name == "etc/group":
			group = string(e.body)
		case name == "opt/tool_"+runtime.GOARCH:
			if e.Typeflag != tar.TypeSymlink || e.Linkname != "/usr/bin/tool" {
				t.Errorf("%s: type %c to %q, want the link to /usr/bin/tool", name, e.Typeflag, e.Linkname)
			}
			links++
		case name == "usr/share/tool/plugins":
			if e.Typeflag != tar.TypeSymlink || e.Linkname != "jit" {
				t.Errorf("%s: type %c to %q, want the link to jit", name, e.Typeflag, e.Linkname)
			}
		case e.Typeflag == tar.TypeReg && strings.HasPrefix(name, "usr/"):
			files = append(files, "/"+name)
		}
	}
	if links != 1 {
		t.Errorf("no link /opt/tool_%s: {arch} is the platform's architecture", runtime.GOARCH)
	}
	slices.Sort(files)
	if want := []string{"/usr/bin/tool", "/usr/share/tool/catalog_version", "/usr/share/tool/data.sql"}; !slices.Equal(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}
	if !strings.Contains(passwd, "\npostgres:x:26:26:") || !strings.HasPrefix(passwd, "root:x:0:0:") || !strings.Contains(passwd, "nonroot:") {
		t.Errorf("/etc/passwd:\n%s\nwant root, nonroot and postgres (26)", passwd)
	}
	if !strings.Contains(group, "\npostgres:x:26:") {
		t.Errorf("/etc/group:\n%s\nwant postgres (26)", group)
	}
}
