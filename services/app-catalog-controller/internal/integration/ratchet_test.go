package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver/apiservertest"
)

const (
	rungLoose  = `{"type":"object","properties":{"replicas":{"type":"integer","default":1},"note":{"type":"string"},"size":{"type":"integer"}}}`
	rungStrict = `{"type":"object","properties":{"replicas":{"type":"integer","default":1},"note":{"type":"string","maxLength":4},` +
		`"size":{"type":"integer","x-kubernetes-validations":[{"rule":"self <= 10","message":"at most 10"}]}}}`
)

// An update is validated with ratcheting, as a CRD's is (CRDValidationRatcheting, on by default
// since Kubernetes 1.30): once the schema has become stricter than the values an object was
// written with, an update that leaves those values as they were passes, and one that changes a
// value to another the schema or a rule refuses fails, on the apps API as on its CRD twin.
func TestUpdatesRatchetAsForCRD(t *testing.T) {
	ctx := context.Background()
	def, _ := withTwin(t, "Rung", "rungs", rungLoose)
	ns := tenantNamespace(t, "rungs")
	sides := []schema.GroupVersionResource{
		{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "rungs"},
		{Group: "twin.flotilla.dev", Version: "v1", Resource: "rungs"},
	}
	rung := func(gvr schema.GroupVersionResource, name, note string, size int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"note": note, "size": size}}}
		u.SetAPIVersion(gvr.GroupVersion().String())
		u.SetKind("Rung")
		u.SetName(name)
		return u
	}
	for _, gvr := range sides {
		if _, err := apps.Resource(gvr).Namespace(ns).Create(ctx, rung(gvr, "r", "far too long", 50), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", gvr.Group, err)
		}
	}

	// The schema becomes stricter than the values written, on both.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "rungs.twin.flotilla.dev"}, crd); err != nil {
			return err
		}
		strict, err := apiservertest.CRD("twin.flotilla.dev", "Rung", "rungs", rungStrict)
		if err != nil {
			return err
		}
		crd.Spec.Versions = strict.Spec.Versions
		return kube.Update(ctx, crd)
	}); err != nil {
		t.Fatal(err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &catalogv1.ApplicationDefinition{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(def), cur); err != nil {
			return err
		}
		cur.Spec.Schema.Raw = []byte(rungStrict)
		return kube.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	for _, gvr := range sides {
		eventually(t, 30*time.Second, gvr.Group+" serving the stricter schema", func() (bool, error) {
			_, err := apps.Resource(gvr).Namespace(ns).Create(ctx, rung(gvr, "probe", "far too long", 50), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return apierrors.IsInvalid(err), nil
		})
	}

	// A create the schema refuses: the rules are not run once a value's size is wrong, and say so.
	var created []string
	for _, gvr := range sides {
		_, err := apps.Resource(gvr).Namespace(ns).Create(ctx, rung(gvr, "fresh", "far too long", 50), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		created = append(created, outcomeWithFields(err))
	}
	if want := "422 Invalid [<nil> spec.note]"; created[0] != created[1] || created[1] != want {
		t.Errorf("a create with a note too long and a size a rule refuses: the app %s, the twin %s; want %s", created[0], created[1], want)
	}

	for _, c := range []struct {
		what   string
		change func(spec map[string]any)
		want   string
	}{
		{"an update that leaves the refused values as they were", func(s map[string]any) { s["replicas"] = int64(2) }, "ok"},
		{"a note changed to another one too long", func(s map[string]any) { s["note"] = "still too long" }, "422 Invalid [<nil> spec.note]"},
		{"a size changed to another one a rule refuses", func(s map[string]any) { s["size"] = int64(60) }, "422 Invalid [spec.size]"},
		{"a note made valid, the size left as it was", func(s map[string]any) { s["note"] = "ok" }, "ok"},
	} {
		var got []string
		for _, gvr := range sides {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				u, err := apps.Resource(gvr).Namespace(ns).Get(ctx, "r", metav1.GetOptions{})
				if err != nil {
					return err
				}
				c.change(u.Object["spec"].(map[string]any))
				_, err = apps.Resource(gvr).Namespace(ns).Update(ctx, u, metav1.UpdateOptions{})
				return err
			})
			got = append(got, outcomeWithFields(err))
		}
		if got[0] != got[1] || got[1] != c.want {
			t.Errorf("%s: the app %s, the twin %s; want %s", c.what, got[0], got[1], c.want)
		}
	}
}

// The catalog's own policy does not ratchet: once the definition forbids a value an app was
// written with, a tenant admin's update that leaves it as it was is refused, naming the path, and
// the app keeps what it had. Only an update that removes the value passes.
func TestTheCatalogsPolicyDoesNotRatchet(t *testing.T) {
	ctx := context.Background()
	def := testDefinition(t, "Perch", "perches", func(d *catalogv1.ApplicationDefinition) {
		d.Spec.Schema.Raw = []byte(`{"type":"object","properties":{"image":{"type":"string"},"note":{"type":"string"}}}`)
	})
	if err := kube.Create(ctx, def); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), def) })
	waitDiscovered(t, "perches", true)
	ns := tenantNamespace(t, "perches")
	mallory := tenantAdmin(t, ns, "mallory").Resource(schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "perches"}).Namespace(ns)
	perch := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"image": "evil", "note": "a"}}}
	perch.SetAPIVersion("apps.flotilla.dev/v1alpha1")
	perch.SetKind("Perch")
	perch.SetName("p")
	if _, err := mallory.Create(ctx, perch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &catalogv1.ApplicationDefinition{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(def), cur); err != nil {
			return err
		}
		cur.Spec.ForbiddenPaths = []string{"image"}
		return kube.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	probe := perch.DeepCopy()
	probe.SetName("probe")
	eventually(t, 30*time.Second, "the definition forbidding spec.image", func() (bool, error) {
		_, err := mallory.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err), nil
	})

	update := func(change func(spec map[string]any)) string {
		return outcomeWithFields(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			u, err := mallory.Get(ctx, "p", metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(u.Object["spec"].(map[string]any))
			_, err = mallory.Update(ctx, u, metav1.UpdateOptions{})
			return err
		}))
	}
	if got, want := update(func(s map[string]any) { s["note"] = "b" }), "422 Invalid [spec.image]"; got != want {
		t.Fatalf("an update leaving the forbidden image as it was: %s, want %s", got, want)
	}
	u, err := mallory.Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if note, _, _ := unstructured.NestedString(u.Object, "spec", "note"); note != "a" {
		t.Fatalf("a refused update changed the app: note %q", note)
	}
	if got := update(func(s map[string]any) { delete(s, "image"); s["note"] = "b" }); got != "ok" {
		t.Fatalf("an update removing the forbidden image: %s, want ok", got)
	}
}

// outcomeWithFields is result(err) with the fields an Invalid error names.
func outcomeWithFields(err error) string {
	out := result(err)
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Details != nil {
		var fields []string
		for _, c := range s.Status().Details.Causes {
			fields = append(fields, c.Field)
		}
		slices.Sort(fields)
		out += fmt.Sprintf(" [%s]", strings.Join(fields, " "))
	}
	return out
}
