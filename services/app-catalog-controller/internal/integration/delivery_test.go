package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A definition whose chart creates what the tenants' delivery identity may not is Stalled, names
// what is missing and is not served; once a platform admin grants it (a ClusterRole aggregated into
// the delivery role) it is served.
func TestDefinitionNeedsItsDeliveryGranted(t *testing.T) {
	ctx := context.Background()
	def := testDefinition(t, "Gadget", "gadgets", func(d *catalogv1.ApplicationDefinition) {
		d.Spec.Delivery.Resources = []catalogv1.DeliveredResources{{APIGroup: "gadgets.example.org", Resources: []string{"gadgets"}}}
	})
	if err := kube.Create(ctx, def); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, def) })
	cond := waitCondition(t, def, "Stalled", catalogv1.DeliveryNotPermittedReason)
	if !strings.Contains(cond.Message, "gadgets.gadgets.example.org") {
		t.Fatalf("Stalled message %q does not name gadgets.gadgets.example.org", cond.Message)
	}
	waitDiscovered(t, "gadgets", false)

	grant := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets-delivery", Labels: map[string]string{tenancyv1.LabelAggregateToDelivery: "true"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"gadgets.example.org"}, Resources: []string{"gadgets"}, Verbs: catalogv1.DeliveryVerbs}},
	}
	if err := kube.Create(ctx, grant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, grant) })
	waitCondition(t, def, "Ready", catalogv1.ServedReason)
	waitDiscovered(t, "gadgets", true)
}

// Each delivery namespace holds a copy of the catalog source its apps' charts come from (Flux's
// lockdown refuses a source in another namespace); the copy follows the original and goes when no
// app uses it.
func TestDeliveryNamespaceHoldsCopiesOfItsSources(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	ns := tenantNamespace(t, "copies")
	delivery := tenancyv1.DeliveryNamespace(ns)
	ref := catalogv1.SourceReference{Kind: "HelmRepository", Name: "flotilla-catalog", Namespace: catalogNamespace}
	copyKey := client.ObjectKey{Namespace: delivery, Name: catalog.SourceCopyName(ref)}
	if _, err := apps.Resource(postgresGVR).Namespace(ns).Create(ctx, appObject("Postgres", ns, "copied", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	original := &sourcev1.HelmRepository{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, original); err != nil {
		t.Fatal(err)
	}
	copied := &sourcev1.HelmRepository{}
	eventually(t, 30*time.Second, "the copy of the catalog source", func() (bool, error) {
		err := kube.Get(ctx, copyKey, copied)
		return err == nil && copied.Spec.URL == original.Spec.URL, err
	})

	// The original changes: the copy follows.
	before := original.DeepCopy()
	original.Spec.Interval = metav1.Duration{Duration: 11 * time.Minute}
	if err := kube.Patch(ctx, original, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &sourcev1.HelmRepository{}
		if kube.Get(ctx, client.ObjectKeyFromObject(original), cur) == nil {
			patched := cur.DeepCopy()
			patched.Spec.Interval = before.Spec.Interval
			_ = kube.Patch(ctx, patched, client.MergeFrom(cur))
		}
	})
	eventually(t, 30*time.Second, "the copy to follow the original", func() (bool, error) {
		err := kube.Get(ctx, copyKey, copied)
		return err == nil && copied.Spec.Interval.Duration == 11*time.Minute, err
	})

	// No app uses it any more: it goes.
	if err := apps.Resource(postgresGVR).Namespace(ns).Delete(ctx, "copied", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the unused copy to go", func() (bool, error) {
		err := kube.Get(ctx, copyKey, &sourcev1.HelmRepository{})
		return apierrors.IsNotFound(err), nil
	})
}
