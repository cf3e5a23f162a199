// Command release builds a Flotilla release (see package release) without a container engine.
//
//	release build [-out DIR] [-registry HOST/PREFIX] [-platforms linux/amd64,linux/arm64]
//	release push -bundle DIR -registry HOST/PREFIX [-insecure]
//	release catalog-images -registry HOST/PREFIX [-insecure] [-platforms linux/<this machine's>]
//
// build writes the offline bundle (an OCI image layout) to -out, and pushes it to -registry if
// set. push copies a bundle into a registry: the mirror of an installation without internet.
// catalog-images builds the catalog apps' images alone and pushes them (`make demo` fills its
// node's registry so).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/flotilla-dev/flotilla/libs/release"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release build|push [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		err = build(ctx, os.Args[2:])
	case "push":
		err = push(ctx, os.Args[2:])
	case "catalog-images":
		err = catalogImages(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build, push or catalog-images", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	repo := fs.String("repo", ".", "The repository's root.")
	out := fs.String("out", ".local/release/bundle", "Where to write the offline bundle (an OCI image layout).")
	work := fs.String("work", ".local/release/work", "Where to compile the binaries.")
	registry := fs.String("registry", "", "Also push the release to this registry prefix (host[:port]/path).")
	insecure := fs.Bool("insecure", false, "Push over plain HTTP.")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "Comma-separated platforms of the images.")
	source := fs.String("source", "https://github.com/flotilla-dev/flotilla", "The source repository named in the artifacts.")
	_ = fs.Parse(args)

	meta, err := Describe(*repo)
	if err != nil {
		return err
	}
	meta.Source = *source
	ps, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	start := time.Now()
	b, err := release.Build(ctx, release.Options{Repo: *repo, Meta: meta, Platforms: ps, WorkDir: *work, Log: os.Stderr})
	if err != nil {
		return err
	}
	if err := b.WriteLayout(*out); err != nil {
		return err
	}
	for _, a := range b.Artifacts {
		d, _ := a.Digest()
		fmt.Printf("%-40s %s\n", a.Repository+":"+a.Tag, d)
	}
	fmt.Fprintf(os.Stderr, "release %s (%s): %d artifacts in %s, built in %s\n", meta.Version, meta.Revision, len(b.Artifacts), *out, time.Since(start).Round(time.Second))
	if *registry != "" {
		return b.Push(ctx, *registry, *insecure, os.Stderr)
	}
	return nil
}

func catalogImages(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("catalog-images", flag.ExitOnError)
	repo := fs.String("repo", ".", "The repository's root.")
	work := fs.String("work", ".local/release/work", "Where to compile the binaries.")
	registry := fs.String("registry", "", "The registry prefix (host[:port]/path).")
	insecure := fs.Bool("insecure", false, "Push over plain HTTP.")
	platforms := fs.String("platforms", "linux/"+runtime.GOARCH, "Comma-separated platforms of the images.")
	_ = fs.Parse(args)
	if *registry == "" {
		return fmt.Errorf("-registry is required")
	}
	meta, err := Describe(*repo)
	if err != nil {
		return err
	}
	ps, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	b, err := release.BuildCatalogImages(ctx, release.Options{Repo: *repo, Meta: meta, Platforms: ps, WorkDir: *work, Log: os.Stderr})
	if err != nil {
		return err
	}
	return b.Push(ctx, *registry, *insecure, os.Stderr)
}

func push(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	bundle := fs.String("bundle", ".local/release/bundle", "The offline bundle.")
	registry := fs.String("registry", "", "The registry prefix (host[:port]/path).")
	insecure := fs.Bool("insecure", false, "Push over plain HTTP.")
	_ = fs.Parse(args)
	if *registry == "" {
		return fmt.Errorf("-registry is required")
	}
	b, err := release.ReadLayout(*bundle)
	if err != nil {
		return err
	}
	return b.Push(ctx, *registry, *insecure, os.Stderr)
}

// Describe names the release of the commit checked out in repo: `git describe` of the newest
// v* tag (v0.0.0 when there is none), without the v; its time is the commit's.
func Describe(repo string) (release.Meta, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return release.Meta{}, fmt.Errorf("git rev-parse: %w", err)
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return release.Meta{}, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return release.Meta{}, err
	}
	version, err := git("describe", "--tags", "--match", "v[0-9]*", "--dirty")
	if err != nil { // no release tag yet
		count, err := git("rev-list", "--count", "HEAD")
		if err != nil {
			return release.Meta{}, err
		}
		version = fmt.Sprintf("v0.0.0-%s-g%s", count, rev[:7])
		if dirty, _ := git("status", "--porcelain", "--untracked-files=no"); dirty != "" {
			version += "-dirty"
		}
	}
	return release.Meta{Version: strings.TrimPrefix(version, "v"), Revision: rev, Created: time.Unix(secs, 0).UTC()}, nil
}

// parsePlatforms parses comma-separated os/arch[/variant] platforms.
func parsePlatforms(list string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for s := range strings.SplitSeq(list, ",") {
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return nil, err
		}
		ps = append(ps, *p)
	}
	return ps, nil
}
