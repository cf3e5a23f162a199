package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apps go through the admission chain a CRD goes through: a real validating webhook and a real
// ValidatingAdmissionPolicy, registered for the app kind and its CRD twin alike, refuse the same
// requests with the same codes and let the same ones through.
func TestAppsGoThroughAdmission(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "admitted")
	_, twin := withTwin(t, "Gate", "gates", jotSchema)
	app := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "gates"}

	// The webhook refuses objects labelled deny=yes, and counts what it is asked.
	var asked atomic.Int32
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		asked.Add(1)
		obj := &unstructured.Unstructured{}
		_ = json.Unmarshal(review.Request.Object.Raw, &obj.Object)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: obj.GetLabels()["deny"] != "yes"}
		if !review.Response.Allowed {
			review.Response.Result = &metav1.Status{Code: http.StatusForbidden, Message: "the test webhook refuses " + obj.GetKind() + " " + obj.GetName()}
		}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(hook.Close)
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps.flotilla.dev", "twin.flotilla.dev"}, APIVersions: []string{"*"}, Resources: []string{"gates"}},
	}}
	inNamespace := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	webhook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "test-gates"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "gates.test.flotilla.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})},
			Rules:                   rules,
			NamespaceSelector:       inNamespace,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		}},
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-gates"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rules[0]}}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "!has(object.spec.replicas) || object.spec.replicas <= 3", Message: "at most 3 replicas"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-gates"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: inNamespace},
		},
	}
	for _, obj := range []client.Object{webhook, policy, binding} {
		if err := kube.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.Delete(ctx, obj) })
	}

	sides := map[string]schema.GroupVersionResource{"app": app, "twin": twin}
	apiVersions := map[string]string{"app": "apps.flotilla.dev/v1alpha1", "twin": "twin.flotilla.dev/v1"}
	try := func(side, name string, replicas int, deny bool) string {
		obj := memo(apiVersions[side], "Gate", ns, name, "red", replicas)
		if deny {
			obj.SetLabels(map[string]string{"deny": "yes"})
		}
		_, err := apps.Resource(sides[side]).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !strings.Contains(err.Error(), "test webhook refuses") && !strings.Contains(err.Error(), "at most 3 replicas") {
			return "unexpected: " + err.Error()
		}
		return result(err)
	}
	// Policies and webhooks are picked up from informers: wait until both act on both sides.
	eventually(t, 30*time.Second, "the policy and the webhook to act", func() (bool, error) {
		for side := range sides {
			many, denied := try(side, "many", 5, false), try(side, "denied", 1, true)
			if !strings.HasPrefix(many, "422") || !strings.HasPrefix(denied, "403") {
				return false, fmt.Errorf("%s: 5 replicas: %s; labelled deny: %s", side, many, denied)
			}
		}
		return true, nil
	})
	before := asked.Load()
	for _, c := range []struct {
		name     string
		replicas int
		deny     bool
	}{{"fine", 2, false}, {"many", 4, false}, {"denied", 1, true}} {
		if a, tw := try("app", c.name, c.replicas, c.deny), try("twin", c.name, c.replicas, c.deny); a != tw {
			t.Errorf("%s: app %s, twin %s", c.name, a, tw)
		}
	}
	if asked.Load() == before {
		t.Fatal("the webhook was never asked about an app")
	}
}

// DELETE on the collection deletes every app the selector matches, as for a CRD; apps with
// deletion protection are kept, and the answer says which.
func TestDeleteCollection(t *testing.T) {
	ctx := context.Background()
	def := testDefinition(t, "Crate", "crates", nil)
	if err := kube.Create(ctx, def); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, def) })
	waitDiscovered(t, "crates", true)
	ns := tenantNamespace(t, "collection")
	pg := apps.Resource(schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "crates"}).Namespace(ns)
	for name, spec := range map[string]string{"a": "{}", "b": "{}", "keep": "{deletionProtection: true}", "other": "{}"} {
		obj := appObject("Crate", ns, name, spec)
		if name != "other" {
			obj.SetLabels(map[string]string{"batch": "1"})
		}
		if _, err := pg.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := pg.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "batch=1"})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), ns+"/keep") {
		t.Fatalf("delete collection with a protected app: %v", err)
	}
	eventually(t, 2*time.Minute, "a and b to go", func() (bool, error) {
		l, err := pg.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var names []string
		for _, it := range l.Items {
			names = append(names, it.GetName())
		}
		return strings.Join(names, ",") == "keep,other", nil
	})
	if _, err := pg.Patch(ctx, "keep", types.MergePatchType, []byte(`{"spec":{"deletionProtection":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pg.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}
