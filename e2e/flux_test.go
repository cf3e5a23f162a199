package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"sigs.k8s.io/yaml"
)

// The GitOps tree decodes strictly into the Flux API types (no unknown or misspelt fields), points
// at paths and charts that exist, and delivers every chart the way Flotilla promises: CRDs
// CreateReplace, no uninstall on failure.
func TestFluxTree(t *testing.T) {
	var releases []string
	err := filepath.WalkDir(filepath.Join(repo, "deploy", "flux"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, o := range decodeAll(t, raw) {
			doc, err := yaml.Marshal(o.Object)
			if err != nil {
				return err
			}
			switch o.GetKind() {
			case "HelmRelease":
				hr := &helmv2.HelmRelease{}
				strict(t, path, doc, hr)
				releases = append(releases, hr.Name)
				checkRelease(t, hr)
			case "Kustomization":
				k := &kustomizev1.Kustomization{}
				strict(t, path, doc, k)
				if _, err := os.Stat(filepath.Join(repo, k.Spec.Path)); err != nil {
					t.Errorf("%s: Kustomization %s points at missing path %s", path, k.Name, k.Spec.Path)
				}
			case "GitRepository":
				strict(t, path, doc, &sourcev1.GitRepository{})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range services(t) {
		if !slices.Contains(releases, svc) {
			t.Errorf("deploy/flux has no HelmRelease for service %s", svc)
		}
	}
}

func strict(t *testing.T, path string, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

func checkRelease(t *testing.T, hr *helmv2.HelmRelease) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repo, hr.Spec.Chart.Spec.Chart, "Chart.yaml")); err != nil {
		t.Errorf("HelmRelease %s: chart %s not in the repository", hr.Name, hr.Spec.Chart.Spec.Chart)
	}
	// Flux runs with its multi-tenancy lockdown: no cross-namespace source, an explicit identity.
	if ns := hr.Spec.Chart.Spec.SourceRef.Namespace; ns != "" && ns != hr.Namespace {
		t.Errorf("HelmRelease %s/%s: its chart's source is in namespace %s: --no-cross-namespace-refs refuses it", hr.Namespace, hr.Name, ns)
	}
	if hr.Spec.ServiceAccountName == "" {
		t.Errorf("HelmRelease %s/%s names no serviceAccountName: under --default-service-account it would install with no rights", hr.Namespace, hr.Name)
	}
	if hr.Spec.Install == nil || hr.Spec.Install.CRDs != helmv2.CreateReplace {
		t.Errorf("HelmRelease %s: install.crds must be CreateReplace", hr.Name)
	}
	if hr.Spec.Upgrade == nil || hr.Spec.Upgrade.CRDs != helmv2.CreateReplace {
		t.Errorf("HelmRelease %s: upgrade.crds must be CreateReplace", hr.Name)
	}
	if hr.Spec.Upgrade.Remediation == nil || hr.Spec.Upgrade.Remediation.Strategy == nil ||
		*hr.Spec.Upgrade.Remediation.Strategy != helmv2.RollbackRemediationStrategy {
		t.Errorf("HelmRelease %s: a failed upgrade must roll back, not uninstall", hr.Name)
	}
}
