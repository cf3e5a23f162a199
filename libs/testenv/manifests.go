package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ApplyFile server-side applies every object of a multi-document YAML file, so that applying the
// same file twice is harmless.
func ApplyFile(ctx context.Context, c client.Client, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("flotilla-testenv"), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s: applying %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// ReadWebhooks reads the ValidatingWebhookConfigurations of a YAML file (as controller-gen writes
// them), for Options.Webhooks.
func ReadWebhooks(paths ...string) ([]*admissionv1.ValidatingWebhookConfiguration, error) {
	var out []*admissionv1.ValidatingWebhookConfiguration
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		hook := &admissionv1.ValidatingWebhookConfiguration{}
		if err := yaml.Unmarshal(raw, hook); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, hook)
	}
	return out, nil
}
