package release

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// CloudNativePG's operator renders as its module describes it, running the image given (in its
// Deployment and where it hands itself to PostgreSQL pods), its namespace first and the
// platform's, its Namespace and CRDs never pruned or substituted by Flux.
func TestOperatorManifests(t *testing.T) {
	const image = "${FLOTILLA_REGISTRY}/catalog-images/cnpg@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	out, err := OperatorManifests(context.Background(), repo, filepath.Join(repo, "deploy", "operators", "cnpg"), image)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Kind     string
		Metadata struct {
			Name        string
			Labels      map[string]string
			Annotations map[string]string
		}
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Image string
						Env   []struct{ Name, Value string }
					}
				}
			}
		}
	}
	never := func(o object) bool {
		return o.Metadata.Annotations["kustomize.toolkit.fluxcd.io/prune"] == "disabled" &&
			o.Metadata.Annotations["kustomize.toolkit.fluxcd.io/substitute"] == "disabled"
	}
	kinds, handsItself := map[string]int{}, false
	for i, doc := range strings.Split(string(out), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		kinds[o.Kind]++
		switch o.Kind {
		case "Namespace":
			if i != 0 || o.Metadata.Name != "cnpg-system" || o.Metadata.Labels["flotilla.dev/platform"] != "true" || !never(o) {
				t.Errorf("Namespace (object %d): %+v; want the first, cnpg-system, the platform's, never pruned", i, o.Metadata)
			}
		case "CustomResourceDefinition":
			if !never(o) || o.Metadata.Annotations["controller-gen.kubebuilder.io/version"] == "" {
				t.Errorf("CRD %s: annotations %v; want its own and never pruned or substituted", o.Metadata.Name, o.Metadata.Annotations)
			}
		case "Deployment":
			c := o.Spec.Template.Spec.Containers[0]
			if c.Image != image {
				t.Errorf("the operator runs %s, want %s", c.Image, image)
			}
			for _, e := range c.Env {
				if e.Name == "OPERATOR_IMAGE_NAME" {
					handsItself = e.Value == image
				}
			}
		default:
			if never(o) {
				t.Errorf("%s %s is never substituted: only the Namespace and CRDs are", o.Kind, o.Metadata.Name)
			}
		}
	}
	if !handsItself {
		t.Errorf("the operator's OPERATOR_IMAGE_NAME, the image it hands PostgreSQL pods, is not %s", image)
	}
	if kinds["Namespace"] != 1 || kinds["CustomResourceDefinition"] == 0 || kinds["Deployment"] != 1 {
		t.Errorf("kinds rendered: %v", kinds)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "operator.yaml"), []byte("builder: cnpg\nmodule: m\nkustomize: config\nimage: c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OperatorManifests(context.Background(), repo, bad, image); err == nil || !strings.Contains(err.Error(), "kustomize") {
		t.Errorf("an operator.yaml with a misspelt field: %v, want an error naming it", err)
	}
}
