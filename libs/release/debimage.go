package release

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// DebImageSpec is an image made from Debian's packages (deploy/catalog/<app>/image.yaml): the
// software a catalog app runs, without a container engine and without anything pulled from a
// registry. Only what its programs need goes in: each program with the shared libraries it loads
// (its ELF dependencies, found in the packages), the trees it reads, and links.
type DebImageSpec struct {
	// Name is the image's repository under the release's catalog images (catalog-images/<name>).
	Name string `json:"name"`
	// Tag names the software's version (the app's chart picks it by the version a customer asks for).
	Tag string `json:"tag"`
	// Packages are fetched with libs/builder/debs.sh from the machine's Debian archive; list
	// the libraries' packages too (their files are found, not their dependencies resolved).
	Packages []string `json:"packages"`
	// Programs are the executables to keep, with their ELF closure.
	Programs []string `json:"programs"`
	// Trees are directories kept whole (data the programs read).
	Trees []string `json:"trees,omitempty"`
	// Links are symbolic links to make: path in the image → target.
	Links map[string]string `json:"links,omitempty"`
	// User is the uid (and gid) the image runs as; never 0.
	User int `json:"user"`
	// Entrypoint is the image's entrypoint (the chart may give its own command).
	Entrypoint []string `json:"entrypoint"`
}

// ReadDebImageSpec reads and checks an image.yaml.
func ReadDebImageSpec(file string) (DebImageSpec, error) {
	var s DebImageSpec
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
	case len(s.Packages) == 0 || len(s.Programs) == 0:
		err = errors.New("packages and programs are required")
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

// FetchDebs fetches the spec's packages for this machine (libs/builder/debs.sh, cached outside
// the clone) and returns the root they are unpacked in.
func FetchDebs(ctx context.Context, repo string, s DebImageSpec) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "libs", "builder", "debs.sh"), append([]string{"catalog-" + s.Name}, s.Packages...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fetching the packages of image %s: %w", s.Name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// DebImage assembles the spec's image from the packages unpacked in root (FetchDebs), for the
// machine's platform p: the base layer (CA certificates, /tmp) and one layer of the files kept.
// Every header and time is fixed and the files are sorted, so that the same packages give the
// same digest.
func DebImage(s DebImageSpec, root string, p v1.Platform, m Meta) (v1.Image, error) {
	files, err := debClosure(s, root, p)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Name, err)
	}
	base, err := baseLayer(m.Created)
	if err != nil {
		return nil, err
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
		default:
			body, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				return nil, err
			}
			t.file(name, int64(f.mode.Perm()), body)
		}
	}
	layer, err := t.layer()
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "flotilla release: CA certificates"}},
		mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "flotilla release: " + s.Name + " from Debian's packages " + strings.Join(s.Packages, " ")}},
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
	cf.Config = v1.Config{
		Entrypoint: s.Entrypoint,
		User:       fmt.Sprintf("%d:%d", s.User, s.User),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     m.labels(s.Name),
	}
	return mutate.ConfigFile(img, cf)
}

// debFile is a file kept: a regular file (its mode) or a symbolic link (its target).
type debFile struct {
	mode fs.FileMode
	link string
}

// debClosure finds what the image keeps: the programs and trees, the shared libraries the
// programs' ELF files load (and theirs), with every symbolic link on the way, and the spec's links.
func debClosure(s DebImageSpec, root string, p v1.Platform) (map[string]debFile, error) {
	triplet, ok := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[p.Architecture]
	if !ok {
		return nil, fmt.Errorf("no Debian multiarch name for %s", p.Architecture)
	}
	libDirs := []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}
	files := map[string]debFile{}
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
			files[name] = debFile{link: target}
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			return add(target)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is neither a file nor a link", name)
		}
		files[name] = debFile{mode: fi.Mode()}
		needed, interp, err := elfNeeds(filepath.Join(root, name))
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
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			return add("/" + filepath.ToSlash(rel))
		})
		if err != nil {
			return nil, fmt.Errorf("tree %s: %w", tree, err)
		}
	}
	for name, target := range s.Links {
		files[path.Clean(name)] = debFile{link: target}
	}
	return files, nil
}

// elfNeeds is an ELF file's interpreter and the shared libraries it loads; nothing for a file
// that is not ELF.
func elfNeeds(file string) (needed []string, interp string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		var format *elf.FormatError
		if errors.As(err, &format) {
			return nil, "", nil
		}
		return nil, "", err
	}
	defer func() { _ = f.Close() }()
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
func parents(files map[string]debFile) []string {
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
