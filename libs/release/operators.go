package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// OperatorSpec is deploy/operators/<name>/operator.yaml: an operator the catalog's kinds need, as
// its own project describes it (a kustomization in its Go module), running the image of the same
// directory's image.yaml.
type OperatorSpec struct {
	// Builder is the module under libs/builder that pins the operator's version (and builds it).
	Builder string `json:"builder"`
	// Module is the operator's Go module, which holds Kustomization.
	Module        string `json:"module"`
	Kustomization string `json:"kustomization"`
	// Image is the name of the operator's image in Kustomization, replaced by the release's.
	Image string `json:"image"`
}

// OperatorsDir is where a release's GitOps tree holds the operators, one file each
// (<OperatorsDir>/<name>.yaml), applied by the Kustomization flotilla-operators.
const OperatorsDir = "operators"

// OperatorManifests renders the operator of dir (deploy/operators/<name>) running image (a
// reference; repository:tag or repository[:tag]@digest). Its namespace is labelled the platform's,
// so that tenants' NetworkPolicies let it reach what it runs in their namespaces. Its Namespace
// and CRDs are never pruned by Flux (their deletion would delete every tenant's database) and
// never substituted (they are the project's text, not the release's).
func OperatorManifests(ctx context.Context, repo, dir, image string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "operator.yaml"))
	if err != nil {
		return nil, err
	}
	var s OperatorSpec
	if err := yaml.UnmarshalStrict(raw, &s); err != nil {
		return nil, fmt.Errorf("%s/operator.yaml: %w", dir, err)
	}
	if s.Builder == "" || s.Module == "" || s.Kustomization == "" || s.Image == "" {
		return nil, fmt.Errorf("%s/operator.yaml: builder, module, kustomization and image are required", dir)
	}
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", s.Module)
	list.Dir = filepath.Join(repo, "libs", "builder", s.Builder)
	list.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	list.Stderr = &stderr
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("finding %s in libs/builder/%s: %w: %s", s.Module, s.Builder, err, stderr.String())
	}
	base := filepath.Join(strings.TrimSpace(string(out)), s.Kustomization)

	overlay, err := os.MkdirTemp("", "flotilla-operator-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(overlay)
	rel, err := filepath.Rel(overlay, base) // kustomize takes another tree only by a relative path
	if err != nil {
		return nil, err
	}
	img := types.Image{Name: s.Image}
	name, digest, hasDigest := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, img.NewTag = name[:i], name[i+1:]
	}
	img.NewName = name
	if hasDigest {
		img.Digest, img.NewTag = digest, ""
	}
	k := types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{filepath.ToSlash(rel)},
		Images:    []types.Image{img},
		Patches: []types.Patch{
			{Target: &types.Selector{ResId: resid.NewResIdKindOnly("Namespace", "")}, Patch: `{apiVersion: v1, kind: Namespace, metadata: {name: any, labels: {flotilla.dev/platform: "true"}}}`},
		},
	}
	for _, kind := range []string{"Namespace", "CustomResourceDefinition"} {
		k.Patches = append(k.Patches, types.Patch{Target: &types.Selector{ResId: resid.NewResIdKindOnly(kind, "")},
			Patch: `{apiVersion: v1, kind: ` + kind + `, metadata: {name: any, annotations: {kustomize.toolkit.fluxcd.io/prune: disabled, kustomize.toolkit.fluxcd.io/substitute: disabled}}}`})
	}
	body, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), body, 0o644); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone
	opts.Reorder = krusty.ReorderOptionLegacy // as kubectl's: namespaces and CRDs first
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		return nil, fmt.Errorf("rendering %s's %s: %w", s.Module, s.Kustomization, err)
	}
	return m.AsYaml()
}
