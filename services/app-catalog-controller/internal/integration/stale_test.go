package integration

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/catalogsource"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/definition"
)

// staleReconcileWritesNothing reconciles live (Ready, its status written) from stale, the same
// object as read before that status write, as a cache that has not caught up holds it: the
// reconcile must write nothing (no conditions stamped again with new times, no observedGeneration
// going back) and look again.
func staleReconcileWritesNothing(t *testing.T, live, stale client.Object, reconcile func(c client.Client) (ctrl.Result, error)) {
	t.Helper()
	lagging, err := testenv.Lagging(env.Config, kube.Scheme(), stale)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a condition written again would carry another transition time (seconds)
	res, err := reconcile(lagging)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Error("a reconcile from a stale copy is not looked at again")
	}
	after := live.DeepCopyObject().(client.Object)
	if err := kube.Get(context.Background(), client.ObjectKeyFromObject(live), after); err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != live.GetResourceVersion() {
		t.Errorf("the status was written from a stale copy (resourceVersion %s → %s)", live.GetResourceVersion(), after.GetResourceVersion())
	}
}

func TestADefinitionReconciledFromAStaleCopyWritesNothing(t *testing.T) {
	ctx := context.Background()
	def := testDefinition(t, "Stale", "stales", nil)
	if err := kube.Create(ctx, def); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, def) })
	waitCondition(t, def, "Ready", catalogv1.ServedReason)
	live := &catalogv1.ApplicationDefinition{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(def), live); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	stale := live.DeepCopy()
	stale.Status = catalogv1.ApplicationDefinitionStatus{}
	staleReconcileWritesNothing(t, live, stale, func(c client.Client) (ctrl.Result, error) {
		return (&definition.Reconciler{Client: c, Discovery: dc}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(live)})
	})
}

func TestACatalogSourceReconciledFromAStaleCopyWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	repo, err := testenv.ServeCharts(filepath.Join(dir, "repo"), 0, writeChart(t, dir, "staleval", "0.1.0", definitionYAML("Staleval", "stalevals")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	helmSource(t, "stale-charts", sourcev1.HelmRepositorySpec{URL: repo.URL})
	live := waitSource(t, "stale-charts", "Ready", "Succeeded")
	fetcher := &catalogsource.Fetcher{HTTP: http.DefaultClient, MaxSize: 10 << 20}
	stale := live.DeepCopy()
	stale.Status = catalogv1.CatalogSourceStatus{}
	staleReconcileWritesNothing(t, live, stale, func(c client.Client) (ctrl.Result, error) {
		return (&catalogsource.Reconciler{Client: c, Fetcher: fetcher}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(live)})
	})
}
