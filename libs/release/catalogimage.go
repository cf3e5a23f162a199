package release

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

// CatalogImageSpec is the image of a catalog app (deploy/catalog/<app>/image.yaml), built
// without a container engine and without anything pulled from a registry: from Debian's packages
// (software a distribution builds, such as Redis) or from Go modules libs/builder pins (such as
// etcd). Only what its programs need goes in: each program with the shared libraries it loads
// (its ELF dependencies, found in the packages), the trees it reads, and links.
type CatalogImageSpec struct {
	// Name is the image's repository under the release's catalog images (catalog-images/<name>).
	Name string `json:"name"`
	// Tag names the software's version (the app's chart picks it by the version a customer asks for).
	Tag string `json:"tag"`
	// Packages are fetched with libs/builder/debs.sh from the machine's Debian archive, for its
	// architecture only; list the libraries' packages too (their files are found, not their
	// dependencies resolved).
	Packages []string `json:"packages,omitempty"`
	// Programs are the packages' executables to keep, with their ELF closure.
	Programs []string `json:"programs,omitempty"`
	// Trees are the packages' directories kept whole (data the programs read), with the shared
	// libraries their ELF files load.
	Trees []string `json:"trees,omitempty"`
	// Exclude leaves out of the trees the files at or under these paths (a plugin whose libraries
	// the image does not carry).
	Exclude []string `json:"exclude,omitempty"`
	// Links are symbolic links to make: path in the image ({arch}: the platform's architecture,
	// as Go names it) → target.
	Links map[string]string `json:"links,omitempty"`
	// Tools are Go programs of libs/builder/binaries.txt, built for each platform of the release:
	// path in the image → its name in binaries.txt.
	Tools map[string]string `json:"tools,omitempty"`
	// User is the uid (and gid) the image runs as; never 0.
	User int `json:"user"`
	// UserName names User in the image's /etc/passwd and /etc/group, for programs that look their
	// user up (PostgreSQL's initdb does); without it only root and nonroot are named.
	UserName string `json:"userName,omitempty"`
	// Entrypoint is the image's entrypoint (the chart may give its own command).
	Entrypoint []string `json:"entrypoint"`
}

// ReadCatalogImageSpec reads and checks an image.yaml.
func ReadCatalogImageSpec(file string) (CatalogImageSpec, error) {
	var s CatalogImageSpec
	raw, err := os.ReadFile(file)
	if err != nil {
		return s, err
	}
	if err := yaml.UnmarshalStrict(raw, &s); err != nil {
		return s, fmt.Errorf("%s: %w", file, err)
	}
	switch {
	case s.Name == "" || s.Tag == "":
		err = errors.New("name and tag are required")
	case len(s.Packages) == 0 && len(s.Tools) == 0:
		err = errors.New("packages (with programs) or tools are required")
	case len(s.Packages) > 0 && len(s.Programs) == 0:
		err = errors.New("programs are required with packages")
	case s.User <= 0:
		err = errors.New("user must be a uid other than root's")
	case len(s.Entrypoint) == 0:
		err = errors.New("entrypoint is required")
	}
	if err != nil {
		return s, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// ErrOtherMachine says that an image of Debian's packages is built for this machine's platform
// only: its packages are fetched for it.
var ErrOtherMachine = errors.New("an image of Debian's packages is built for this machine's platform only (linux/" + runtime.GOARCH + ")")

// BuildCatalogImage builds the spec's image for platform p: its tools compiled under workDir, its
// packages fetched (for this machine's platform only: ErrOtherMachine for another).
func BuildCatalogImage(ctx context.Context, repo string, s CatalogImageSpec, p v1.Platform, workDir string, m Meta) (v1.Image, error) {
	if len(s.Packages) > 0 && (p.OS != "linux" || p.Architecture != runtime.GOARCH) {
		return nil, ErrOtherMachine
	}
	root, err := FetchDebs(ctx, repo, s)
	if err != nil {
		return nil, err
	}
	tools := filepath.Join(workDir, p.OS+"-"+p.Architecture+p.Variant, CatalogImages, s.Name)
	if err := BuildTools(ctx, repo, s, p, tools); err != nil {
		return nil, err
	}
	return CatalogImage(s, root, tools, p, m)
}

// FetchDebs fetches the spec's packages for this machine (libs/builder/debs.sh, cached outside
// the clone) and returns the root they are unpacked in; "" when the image has none.
func FetchDebs(ctx context.Context, repo string, s CatalogImageSpec) (string, error) {
	if len(s.Packages) == 0 {
		return "", nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "libs", "builder", "debs.sh"), append([]string{"catalog-" + s.Name}, s.Packages...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fetching the packages of image %s: %w", s.Name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildTools builds the spec's tools for platform p into dir, each named as in
// libs/builder/binaries.txt, from the builder's module that pins it, as GoBuild builds this
// repository's programs (static, no paths, no build ID).
func BuildTools(ctx context.Context, repo string, s CatalogImageSpec, p v1.Platform, dir string) error {
	if len(s.Tools) == 0 {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(repo, "libs", "builder", "binaries.txt"))
	if err != nil {
		return err
	}
	known := map[string][]string{} // name → module, package, version
	for line := range strings.Lines(string(raw)) {
		if f := strings.Fields(line); len(f) == 4 && !strings.HasPrefix(f[0], "#") {
			known[f[0]] = f[1:]
		}
	}
	for _, tool := range slices.Sorted(maps.Values(s.Tools)) {
		k, ok := known[tool]
		if !ok {
			return fmt.Errorf("image %s: tool %s is not in libs/builder/binaries.txt", s.Name, tool)
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=",
			"-o", filepath.Join(dir, tool), k[1])
		cmd.Dir = filepath.Join(repo, "libs", "builder", k[0])
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("image %s: go build %s for %s: %w\n%s", s.Name, k[1], p.String(), err, msg)
		}
	}
	return nil
}

// CatalogImage assembles the spec's image for platform p from the packages unpacked in root
// (FetchDebs; for the machine's platform only) and the tools built into toolDir (BuildTools): the
// base layer (CA certificates, /tmp) and one layer of the files kept. Every header and time is
// fixed and the files are sorted, so that the same inputs give the same digest.
func CatalogImage(s CatalogImageSpec, root, toolDir string, p v1.Platform, m Meta) (v1.Image, error) {
	files := map[string]imageFile{}
	var err error
	if len(s.Packages) > 0 {
		if files, err = debClosure(s, root, p); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
	}
	for at, tool := range s.Tools {
		files[path.Clean(at)] = imageFile{mode: 0o755, from: filepath.Join(toolDir, tool)}
	}
	for name, target := range s.Links {
		files[path.Clean(strings.ReplaceAll(name, "{arch}", p.Architecture))] = imageFile{link: target}
	}
	if s.UserName != "" {
		files["/etc/passwd"] = imageFile{mode: 0o644, body: fmt.Appendf(nil, "%s%s:x:%d:%d:%[2]s:/:/sbin/nologin\n", basePasswd, s.UserName, s.User, s.User)}
		files["/etc/group"] = imageFile{mode: 0o644, body: fmt.Appendf(nil, "%s%s:x:%d:\n", baseGroup, s.UserName, s.User)}
	}
	t := &tarWriter{created: m.Created}
	for _, dir := range parents(files) {
		t.dir(dir, 0o755)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f := files[name]
		switch {
		case f.link != "":
			t.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.link, Mode: 0o777}, nil)
		case f.body != nil:
			t.file(name, int64(f.mode.Perm()), f.body)
		default:
			from := f.from
			if from == "" {
				from = filepath.Join(root, name)
			}
			body, err := os.ReadFile(from)
			if err != nil {
				return nil, err
			}
			t.file(name, int64(f.mode.Perm()), body)
		}
	}
	return baseAnd(t, s.Name+" from "+strings.Join(append(slices.Sorted(maps.Values(s.Tools)), s.Packages...), " "), p, m, v1.Config{
		Entrypoint: s.Entrypoint,
		User:       fmt.Sprintf("%d:%d", s.User, s.User),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     m.labels(s.Name),
	})
}

// imageFile is a file kept: a regular file (its mode, and its body or where it comes from when not
// from the packages' root) or a symbolic link (its target).
type imageFile struct {
	mode fs.FileMode
	body []byte
	from string
	link string
}

// debClosure finds what the image keeps of the packages: the programs and trees, the shared
// libraries their ELF files load (and theirs), with every symbolic link on the way.
func debClosure(s CatalogImageSpec, root string, p v1.Platform) (map[string]imageFile, error) {
	triplet, ok := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[p.Architecture]
	if !ok {
		return nil, fmt.Errorf("no Debian multiarch name for %s", p.Architecture)
	}
	libDirs := []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}
	files := map[string]imageFile{}
	var add func(name string) error
	add = func(name string) error {
		name = path.Clean(name)
		if _, done := files[name]; done {
			return nil
		}
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			return fmt.Errorf("%s is in none of the packages: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(filepath.Join(root, name))
			if err != nil {
				return err
			}
			files[name] = imageFile{link: target}
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			if fi, err := os.Stat(filepath.Join(root, target)); err == nil && fi.IsDir() {
				return nil // a directory's link: what the directory holds is kept by a tree, if at all
			}
			return add(target)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is neither a file nor a link", name)
		}
		files[name] = imageFile{mode: fi.Mode()}
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			return err
		}
		needed, interp, err := elfNeeds(f)
		_ = f.Close()
		if err != nil || (needed == nil && interp == "") {
			return err
		}
		if interp != "" {
			if err := add(interp); err != nil {
				return fmt.Errorf("%s's interpreter: %w", name, err)
			}
		}
		for _, lib := range needed {
			found := false
			for _, dir := range libDirs {
				if _, err := os.Lstat(filepath.Join(root, dir, lib)); err == nil {
					if err := add(path.Join(dir, lib)); err != nil {
						return err
					}
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("%s needs %s, which none of the packages has: add its package", name, lib)
			}
		}
		return nil
	}
	for _, prog := range s.Programs {
		if err := add(prog); err != nil {
			return nil, err
		}
	}
	for _, tree := range s.Trees {
		err := filepath.WalkDir(filepath.Join(root, tree), func(p string, d fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(root, p)
			name := "/" + filepath.ToSlash(rel)
			switch {
			case err != nil:
				return err
			case slices.ContainsFunc(s.Exclude, func(x string) bool { return name == x || strings.HasPrefix(name, strings.TrimSuffix(x, "/")+"/") }):
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			case d.IsDir():
				return nil
			}
			return add(name)
		})
		if err != nil {
			return nil, fmt.Errorf("tree %s: %w", tree, err)
		}
	}
	return files, nil
}

// elfNeeds is an ELF file's interpreter and the shared libraries it loads; nothing for a file
// that is not ELF.
func elfNeeds(r io.ReaderAt) (needed []string, interp string, err error) {
	f, err := elf.NewFile(r)
	if err != nil {
		var format *elf.FormatError
		if errors.As(err, &format) || errors.Is(err, io.EOF) { // not ELF, or shorter than its header
			return nil, "", nil
		}
		return nil, "", err
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			raw := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(raw, 0); err != nil {
				return nil, "", err
			}
			interp = strings.TrimRight(string(raw), "\x00")
		}
	}
	if needed, err = f.ImportedLibraries(); err != nil {
		return nil, "", err
	}
	return needed, interp, nil
}

// parents lists every directory above the files, each once, parents first.
func parents(files map[string]imageFile) []string {
	set := map[string]bool{}
	for name := range files {
		for dir := path.Dir(name); dir != "/" && !set[dir]; dir = path.Dir(dir) {
			set[dir] = true
		}
	}
	// The base layer has these already, with modes of their own.
	delete(set, "/etc")
	delete(set, "/tmp")
	return slices.Sorted(maps.Keys(set))
}
