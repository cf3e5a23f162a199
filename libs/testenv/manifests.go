package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// ReadWebhooks reads the ValidatingWebhookConfigurations of YAML files (as controller-gen writes
// them, possibly beside a MutatingWebhookConfiguration), for Options.Webhooks.
func ReadWebhooks(paths ...string) ([]*admissionv1.ValidatingWebhookConfiguration, error) {
	return readKind[admissionv1.ValidatingWebhookConfiguration]("ValidatingWebhookConfiguration", paths)
}

// ReadMutatingWebhooks reads the MutatingWebhookConfigurations of YAML files, for
// Options.MutatingWebhooks.
func ReadMutatingWebhooks(paths ...string) ([]*admissionv1.MutatingWebhookConfiguration, error) {
	return readKind[admissionv1.MutatingWebhookConfiguration]("MutatingWebhookConfiguration", paths)
}

// readKind decodes the documents of kind kind from multi-document YAML files.
func readKind[T any](kind string, paths []string) ([]*T, error) {
	var out []*T
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				f.Close()
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if u.GetKind() != kind {
				continue
			}
			obj := new(T)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

// WaitAdmitted waits (up to a minute) until a server-side dry-run create of probe() passes
// admission and admitted holds for the object the API server would store (a finalizer that a
// MutatingAdmissionPolicy adds, say). After a CRD or an admission policy is installed,
// kube-apiserver refuses creates for a while: the CRD may not be served yet, and mutating
// admission policies answer 503 ("Resource kind … not found") until their type converter has read
// the CRD's schema. A suite waits here instead of failing its first create.
func WaitAdmitted(ctx context.Context, c client.Client, probe func() client.Object, admitted func(client.Object) bool) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		obj := probe()
		if last = c.Create(ctx, obj, client.DryRunAll); last != nil {
			return false, nil
		}
		return admitted(obj), nil
	})
	if err != nil {
		return fmt.Errorf("%T is not admitted: %w (last: %v)", probe(), err, last)
	}
	return nil
}

// Refuse makes kube-apiserver refuse, with message, the requests rule matches for which the CEL
// expression deny holds (over object, or oldObject for a deletion): a ValidatingAdmissionPolicy
// and its binding, both named name. A test makes a controller's write fail for real with it.
// kube-apiserver picks policies up from an informer: Refuse returns once it acts on this one, that
// is once probe (a dry-run request the policy must refuse) fails with message. lift removes the
// policy again; kube-apiserver stops acting on it moments later.
func Refuse(ctx context.Context, c client.Client, name string, rule admissionv1.RuleWithOperations, deny, message string,
	probe func(context.Context) error) (lift func(context.Context) error, err error) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: rule}}},
			Validations:      []admissionv1.Validation{{Expression: "!(" + deny + ")", Message: message}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	lift = func(ctx context.Context) error {
		return errors.Join(client.IgnoreNotFound(c.Delete(ctx, binding)), client.IgnoreNotFound(c.Delete(ctx, policy)))
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := c.Create(ctx, obj); err != nil {
			return nil, errors.Join(err, lift(ctx))
		}
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = probe(ctx)
		return last != nil && strings.Contains(last.Error(), message), nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ValidatingAdmissionPolicy %s does not act: %w (last: %v)", name, err, last), lift(ctx))
	}
	return lift, nil
}
