package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/libs/release"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"sigs.k8s.io/yaml"
)

// The GitOps tree decodes strictly into the Flux API types (no unknown or misspelt fields) once
// Flux has substituted the release's settings, points at paths and charts that exist, takes every
// chart, image and artifact from the one registry prefix the bootstrap sets, and delivers every
// chart the way Flotilla promises: CRDs CreateReplace, no uninstall on failure.
func TestFluxTree(t *testing.T) {
	const mirror = "mirror.example:5000/flotilla"
	settings := strings.NewReplacer("${FLOTILLA_REGISTRY}", mirror, "${FLOTILLA_VERSION}", "1.2.3")
	var releases []string
	err := filepath.WalkDir(filepath.Join(repo, "deploy", "flux"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		bootstrap := strings.Contains(path, filepath.Join("clusters", "production"))
		for _, o := range decodeAll(t, []byte(settings.Replace(string(raw)))) {
			doc, err := yaml.Marshal(o.Object)
			if err != nil {
				return err
			}
			switch o.GetKind() {
			case "HelmRelease":
				hr := &helmv2.HelmRelease{}
				strict(t, path, doc, hr)
				releases = append(releases, hr.Name)
				checkRelease(t, hr, mirror)
			case "Kustomization":
				k := &kustomizev1.Kustomization{}
				strict(t, path, doc, k)
				root := filepath.Join(repo, "deploy", "flux") // the GitOps artifact
				if k.Spec.SourceRef.Name == "flotilla-catalog" {
					root = filepath.Join(repo, "deploy", "catalog")
				}
				if k.Spec.Path == "./"+release.OperatorsDir { // written by the release: one file per operator
					root, k.Spec.Path = filepath.Join(repo, "deploy"), "operators"
				}
				if _, err := os.Stat(filepath.Join(root, k.Spec.Path)); err != nil {
					t.Errorf("%s: Kustomization %s points at %s, not in its artifact", path, k.Name, k.Spec.Path)
				}
				if bootstrap && (k.Spec.PostBuild == nil || k.Spec.PostBuild.Substitute["FLOTILLA_REGISTRY"] != "ghcr.io/flotilla-dev") {
					t.Errorf("%s: Kustomization %s does not set FLOTILLA_REGISTRY to the public registry", path, k.Name)
				}
			case "OCIRepository":
				r := &sourcev1.OCIRepository{}
				strict(t, path, doc, r)
				want := "oci://" + mirror + "/"
				if bootstrap {
					want = "oci://ghcr.io/flotilla-dev/"
				}
				if !strings.HasPrefix(r.Spec.URL, want) {
					t.Errorf("%s: OCIRepository %s reads %s, not under the registry prefix", path, r.Name, r.Spec.URL)
				}
			case "HelmRepository":
				r := &sourcev1.HelmRepository{}
				strict(t, path, doc, r)
				if r.Spec.Type != "oci" || r.Spec.URL != "oci://"+mirror+"/charts" {
					t.Errorf("%s: HelmRepository %s reads %s, not the release's charts under the registry prefix", path, r.Name, r.Spec.URL)
				}
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

func checkRelease(t *testing.T, hr *helmv2.HelmRelease, mirror string) {
	t.Helper()
	chart := hr.Spec.Chart.Spec
	if _, err := os.Stat(filepath.Join(repo, "deploy", "charts", chart.Chart, "Chart.yaml")); err != nil {
		t.Errorf("HelmRelease %s: chart %s not in deploy/charts", hr.Name, chart.Chart)
	}
	if chart.SourceRef.Kind != "HelmRepository" || chart.SourceRef.Name != "flotilla-charts" || chart.Version != "1.2.3" {
		t.Errorf("HelmRelease %s: its chart must be the release's (HelmRepository flotilla-charts, version ${FLOTILLA_VERSION})", hr.Name)
	}
	var values struct {
		Image struct{ Repository string } `json:"image"`
	}
	if hr.Spec.Values == nil || json.Unmarshal(hr.Spec.Values.Raw, &values) != nil || values.Image.Repository != mirror+"/"+chart.Chart {
		t.Errorf("HelmRelease %s: values.image.repository must be ${FLOTILLA_REGISTRY}/%s", hr.Name, chart.Chart)
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
