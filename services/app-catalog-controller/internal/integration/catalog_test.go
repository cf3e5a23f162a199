package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/definition"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// testDefinition is a definition of the Postgres chart under another kind.
func testDefinition(t *testing.T, kind, plural string, mutate func(*catalogv1.ApplicationDefinition)) *catalogv1.ApplicationDefinition {
	t.Helper()
	def := &catalogv1.ApplicationDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural},
		Spec: catalogv1.ApplicationDefinitionSpec{
			Names: catalogv1.Names{Kind: kind, Plural: plural},
			Chart: catalogv1.Chart{Name: "postgres", SourceRef: catalogv1.SourceReference{Kind: "HelmRepository", Name: "flotilla-catalog", Namespace: catalogNamespace}},
		},
	}
	def.Spec.Schema.Raw = []byte(`{"type":"object","properties":{"replicas":{"type":"integer","default":1}}}`)
	if mutate != nil {
		mutate(def)
	}
	return def
}

func waitCondition(t *testing.T, def *catalogv1.ApplicationDefinition, condType, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	eventually(t, 30*time.Second, def.Name+" "+condType+"="+reason, func() (bool, error) {
		cur := &catalogv1.ApplicationDefinition{}
		if err := kube.Get(context.Background(), client.ObjectKeyFromObject(def), cur); err != nil {
			return false, err
		}
		got = apimeta.FindStatusCondition(cur.Status.Conditions, condType)
		want := metav1.ConditionTrue // Stalled=True, Ready=True when served, Ready=False otherwise
		if condType == "Ready" && reason != catalogv1.ServedReason {
			want = metav1.ConditionFalse
		}
		return got != nil && got.Status == want && got.Reason == reason &&
			(cur.DeletionTimestamp != nil || cur.Status.ObservedGeneration == cur.Generation), nil
	})
	return got
}

func TestBadDefinitionsAreStalledWithTheReason(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")

	cases := []struct {
		def     *catalogv1.ApplicationDefinition
		reason  string
		message string
	}{
		{testDefinition(t, "Broken", "brokens", func(d *catalogv1.ApplicationDefinition) {
			d.Spec.Schema.Raw = []byte(`{"type":"object","properties":{"size":{"description":"no type"}}}`)
		}), catalogv1.InvalidSchemaReason, "spec.schema.properties[size].type: Required value"},
		{testDefinition(t, "Pgclone", "pgclones", func(d *catalogv1.ApplicationDefinition) {
			d.Spec.Names.ShortNames = []string{"pg"}
		}), catalogv1.KindConflictReason, `"pg" (defined by postgreses)`},
		{testDefinition(t, "Pod", "pods", nil), catalogv1.BuiltinConflictReason, `"pods" (pods)`},
	}
	for _, c := range cases {
		t.Run(c.def.Name, func(t *testing.T) {
			if err := kube.Create(ctx, c.def); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = kube.Delete(ctx, c.def) })
			cond := waitCondition(t, c.def, "Stalled", c.reason)
			if !strings.Contains(cond.Message, c.message) {
				t.Fatalf("Stalled message %q does not contain %q", cond.Message, c.message)
			}
		})
	}
	// None of them is served; the older Postgres keeps its short name.
	waitDiscovered(t, "brokens", false)
	waitDiscovered(t, "pgclones", false)
	if out, err := kubectl(t, "", "get", "pg", "-A"); err != nil {
		t.Fatalf("kubectl get pg: %v\n%s", err, out)
	}

	// Converged definitions are not written again, whatever happens around them.
	before := map[string]string{}
	var defs catalogv1.ApplicationDefinitionList
	if err := kube.List(ctx, &defs); err != nil {
		t.Fatal(err)
	}
	for _, d := range defs.Items {
		before[d.Name] = d.ResourceVersion
	}
	churn := testDefinition(t, "Churn", "churns", nil)
	if err := kube.Create(ctx, churn); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, churn, "Ready", catalogv1.ServedReason)
	if err := kube.Delete(ctx, churn); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := kube.List(ctx, &defs); err != nil {
		t.Fatal(err)
	}
	for _, d := range defs.Items {
		if rv, ok := before[d.Name]; ok && rv != d.ResourceVersion {
			t.Errorf("definition %s was rewritten at steady state (%s → %s)", d.Name, rv, d.ResourceVersion)
		}
	}

	// The CRD schema rejects a definition whose name is not its plural.
	bad := testDefinition(t, "Other", "others", func(d *catalogv1.ApplicationDefinition) { d.Name = "something-else" })
	if err := kube.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "metadata.name must equal spec.names.plural") {
		t.Fatalf("got %v", err)
	}
}

func appObject(kind, ns, name, spec string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("spec: "+spec), &u.Object); err != nil {
		panic(err)
	}
	u.SetAPIVersion("apps.flotilla.dev/v1alpha1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func TestDefinitionRemovedWhileAppsExist(t *testing.T) {
	ctx := context.Background()
	def := testDefinition(t, "Widget", "widgets", nil)
	if err := kube.Create(ctx, def); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, def, "Ready", catalogv1.ServedReason)
	waitDiscovered(t, "widgets", true)
	ns := tenantNamespace(t, "widgetco")
	gvr := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "widgets"}
	if _, err := apps.Resource(gvr).Namespace(ns).Create(ctx, appObject("Widget", ns, "w1", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Deleting the definition waits for its apps, saying which.
	if err := kube.Delete(ctx, def); err != nil {
		t.Fatal(err)
	}
	cond := waitCondition(t, def, "Ready", definition.DeletionBlockedReason)
	if !strings.Contains(cond.Message, ns+"/w1") {
		t.Fatalf("Ready message %q does not name the app", cond.Message)
	}
	// Existing apps stay readable and deletable; new ones are refused.
	if _, err := apps.Resource(gvr).Namespace(ns).Get(ctx, "w1", metav1.GetOptions{}); err != nil {
		t.Fatalf("existing app unreadable: %v", err)
	}
	_, err := apps.Resource(gvr).Namespace(ns).Create(ctx, appObject("Widget", ns, "w2", "{}"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "definition is being deleted") { // as for a CRD being deleted
		t.Fatalf("create during definition deletion: %v", err)
	}
	if err := apps.Resource(gvr).Namespace(ns).Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the definition to go", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(def), &catalogv1.ApplicationDefinition{})
		return apierrors.IsNotFound(err), nil
	})
	waitDiscovered(t, "widgets", false)
}

func TestTenantAdminCreatesAppsOnlyInItsTenant(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	acme, globex := tenantNamespace(t, "acme"), tenantNamespace(t, "globex")
	alice := tenantAdmin(t, acme, "alice")
	eventually(t, 30*time.Second, "alice may create postgreses in "+acme, func() (bool, error) {
		_, err := alice.Resource(postgresGVR).Namespace(acme).Create(ctx, appObject("Postgres", acme, "alices", "{}"), metav1.CreateOptions{})
		return err == nil, err
	})
	if _, err := alice.Resource(postgresGVR).Namespace(acme).Get(ctx, "alices", metav1.GetOptions{}); err != nil {
		t.Fatalf("alice cannot read her app: %v", err)
	}
	_, err := alice.Resource(postgresGVR).Namespace(globex).Create(ctx, appObject("Postgres", globex, "intruder", "{}"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("alice created an app in %s: %v", globex, err)
	}
	if _, err := alice.Resource(postgresGVR).Namespace(globex).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice listed %s: %v", globex, err)
	}
	if err := alice.Resource(postgresGVR).Namespace(acme).Delete(ctx, "alices", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// tenantAdmin returns a client of user, an administrator of the tenant owning namespace ns (a
// member of the group <ns>-admin the tenant-controller binds), once the user may create apps there.
func tenantAdmin(t *testing.T, ns, user string) dynamic.Interface {
	t.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{ns + "-admin"}}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	typed := typedAs(t, user, ns+"-admin")
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "apps.flotilla.dev", Resource: "*"},
	}}
	eventually(t, 30*time.Second, user+"'s role in "+ns, func() (bool, error) {
		got, err := typed.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed, err
	})
	return c
}

// claim makes a PersistentVolumeClaim of an app's release, owned by the chart's Cluster as
// CloudNativePG's are, so that garbage collection would take it with the release; labels are
// further label keys and values.
func claim(t *testing.T, ns, release, name string, labels ...string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	cluster := &unstructured.Unstructured{}
	cluster.SetAPIVersion("postgresql.cnpg.io/v1")
	cluster.SetKind("Cluster")
	eventually(t, 90*time.Second, "the chart's Cluster", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: release}, cluster)
		return err == nil, err
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/instance": release},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster", Name: release, UID: cluster.GetUID()}}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	for i := 0; i+1 < len(labels); i += 2 {
		pvc.Labels[labels[i]] = labels[i+1]
	}
	if err := kube.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

func TestDeletionProtectionAndVolumePolicies(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	ns := tenantNamespace(t, "volumes")
	pg := apps.Resource(postgresGVR).Namespace(ns)

	// Protected: the delete is refused, naming the field, and nothing is lost.
	if _, err := pg.Create(ctx, appObject("Postgres", ns, "kept", "{deletionProtection: true}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := pg.Delete(ctx, "kept", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.deletionProtection") {
		t.Fatalf("protected delete: %v", err)
	}
	// Only an explicit false turns it off: a replace whose body omits the field, or the whole
	// spec, keeps it (the other values go back to their defaults, as a replace does).
	for _, body := range []string{"{replicas: 2}", ""} {
		var got *unstructured.Unstructured
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // helm-controller writes the status meanwhile
			app, err := pg.Get(ctx, "kept", metav1.GetOptions{})
			if err != nil {
				return err
			}
			replaced := appObject("Postgres", ns, "kept", body)
			if body == "" {
				delete(replaced.Object, "spec")
			}
			replaced.SetResourceVersion(app.GetResourceVersion())
			got, err = pg.Update(ctx, replaced, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("replace with spec %q: %v", body, err)
		}
		if on, _, _ := unstructured.NestedBool(got.Object, "spec", "deletionProtection"); !on {
			t.Errorf("a replace with spec %q turned deletion protection off: %v", body, got.Object["spec"])
		}
		if err := pg.Delete(ctx, "kept", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("delete after a replace with spec %q: %v, want it refused", body, err)
		}
	}
	kept := claim(t, ns, "pg-kept", "data-pg-kept-1")
	// A claim exempt from the policy, as a managed cluster's worker root disk is, goes with its owner.
	disk := claim(t, ns, "pg-kept", "root-pg-kept-1", catalogv1.LabelVolumePolicy, string(catalogv1.VolumePolicyDelete))
	if _, err := pg.Patch(ctx, "kept", "application/merge-patch+json", []byte(`{"spec":{"deletionProtection":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Retain (the Postgres default): the claim outlives the release, labelled with its app.
	if err := pg.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the Cluster to be uninstalled", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-kept"}, &helmv2.HelmRelease{})
		return apierrors.IsNotFound(err), nil
	})
	time.Sleep(2 * time.Second) // give the garbage collector a chance to (wrongly) act
	if err := kube.Get(ctx, client.ObjectKeyFromObject(kept), kept); err != nil {
		t.Fatalf("retained claim: %v", err)
	}
	if kept.Labels[catalogv1.LabelRetainedFrom] != "postgres.kept" || len(kept.OwnerReferences) != 0 {
		t.Fatalf("retained claim not labelled or still owned: %v %v", kept.Labels, kept.OwnerReferences)
	}
	eventually(t, 90*time.Second, "the exempt claim to go with its owner", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(disk), disk)
		if err == nil && disk.Labels[catalogv1.LabelRetainedFrom] != "" {
			return false, fmt.Errorf("the exempt claim was retained: %v", disk.Labels)
		}
		return apierrors.IsNotFound(err), nil
	})

	// Delete: no claim is left.
	if _, err := pg.Create(ctx, appObject("Postgres", ns, "scratch", "{volumePolicy: Delete}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := claim(t, ns, "pg-scratch", "data-pg-scratch-1")
	if err := pg.Delete(ctx, "scratch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the claim to be deleted", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(gone), &corev1.PersistentVolumeClaim{})
		return apierrors.IsNotFound(err), nil
	})
}
