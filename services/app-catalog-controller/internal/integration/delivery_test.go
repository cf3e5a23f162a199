package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"

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

// A private catalog: a Helm repository that wants credentials, kept in a Secret of the catalog's
// namespace. An app of it installs, its tenant's delivery namespace holding a copy of the Secret
// beside the source's copy, which the tenant's admin cannot read; new credentials reach the copy;
// once no app uses the source, both copies go.
func TestPrivateCatalogDeliversWithItsCredentials(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	repo, err := testenv.ServeCharts(filepath.Join(dir, "repo"), 0, writeChart(t, dir, "vault", "0.1.0", chartDefinition("Vault", "vaults", 3)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	repo.RequireBasicAuth("partner", "s3cret")
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "private-charts-auth", Namespace: catalogNamespace},
		StringData: map[string]string{"username": "partner", "password": "s3cret"}}
	if err := kube.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), creds) })
	helmSource(t, "private-charts", sourcev1.HelmRepositorySpec{URL: repo.URL, SecretRef: &fluxmeta.LocalObjectReference{Name: creds.Name}})
	waitSource(t, "private-charts", "Ready", "Succeeded")
	waitDiscovered(t, "vaults", true)

	ns := tenantNamespace(t, "private")
	vaults := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "vaults"}
	if _, err := apps.Resource(vaults).Namespace(ns).Create(ctx, appObject("Vault", ns, "keys", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", ns, "vault/keys", "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	delivery := tenancyv1.DeliveryNamespace(ns)
	copyName := catalog.SourceCopyName(catalogv1.SourceReference{Kind: "HelmRepository", Name: "private-charts", Namespace: catalogNamespace})
	copied := &sourcev1.HelmRepository{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: delivery, Name: copyName}, copied); err != nil {
		t.Fatal(err)
	}
	if copied.Spec.SecretRef == nil || copied.Spec.SecretRef.Name != copyName+"-auth" {
		t.Fatalf("the copy names Secret %v; want its own copy %s", copied.Spec.SecretRef, copyName+"-auth")
	}
	password := func() (string, error) {
		s := &corev1.Secret{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: delivery, Name: copyName + "-auth"}, s); err != nil {
			return "", err
		}
		return string(s.Data["password"]), nil
	}
	if got, err := password(); err != nil || got != "s3cret" {
		t.Fatalf("the Secret's copy: %q, %v", got, err)
	}

	// The tenant's admin reads neither the credentials nor their copy.
	mallory := typedAs(t, "mallory", ns+"-admin")
	if _, err := mallory.CoreV1().Secrets(delivery).Get(ctx, copyName+"-auth", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant's admin read the copied credentials: %v", err)
	}
	if _, err := mallory.CoreV1().Secrets(catalogNamespace).Get(ctx, creds.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant's admin read the catalog's credentials: %v", err)
	}

	// The provider rotates the password: the copy follows.
	repo.RequireBasicAuth("partner", "n3w")
	creds.StringData = map[string]string{"password": "n3w"}
	if err := kube.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the copy to hold the new password", func() (bool, error) {
		got, err := password()
		return got == "n3w", err
	})

	// No app uses the source any more: both copies go.
	if err := apps.Resource(vaults).Namespace(ns).Delete(ctx, "keys", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the unused copies to go", func() (bool, error) {
		_, err := password()
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(kube.Get(ctx, client.ObjectKeyFromObject(copied), &sourcev1.HelmRepository{})), nil
	})
}
