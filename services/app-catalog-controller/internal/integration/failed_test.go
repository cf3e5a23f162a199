package integration

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// A Ready CatalogSource is pointed at another path of its artifact, and kube-apiserver refuses
// the definition found there: every reconcile of the new generation fails. kstatus, the judge of
// Flux, kubectl wait and Argo CD, must not call the source Current for that generation; once the
// definition is admitted, it is.
func TestAFailedReconcileIsNeverReadyForTheNewSpec(t *testing.T) {
	ctx := context.Background()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	refused := definitionYAML("Refusedkv", "refusedkvs")
	ociSource(t, "refusing", pushCatalog(t, reg, "refusing/catalog", map[string]string{
		"apps/cache.yaml": definitionYAML("Refusedcache", "refusedcaches"),
		"more/kv.yaml":    refused,
	}))
	catalogSource(t, "OCIRepository", "refusing", "apps")
	src := waitSource(t, "refusing", "Ready", "Succeeded")
	if s := testenv.KStatusOf(t, src); s != kstatus.CurrentStatus {
		t.Fatalf("a Ready source: kstatus %s", s)
	}

	const message = "the test refuses this definition"
	lift, err := testenv.Refuse(ctx, kube, "test-refuse-definition", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{catalogv1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"applicationdefinitions"}},
	}, "object.metadata.name == 'refusedkvs'", message, func(ctx context.Context) error {
		probe := &catalogv1.ApplicationDefinition{}
		if err := yaml.Unmarshal([]byte(refused), probe); err != nil {
			return err
		}
		return kube.Create(ctx, probe, client.DryRunAll)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lift(context.Background()) })

	before := src.DeepCopy()
	src.Spec.Path = "more"
	if err := kube.Patch(ctx, src, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	// A reconcile of generation 2 wrote its verdict once Ready is about generation 2.
	eventually(t, 60*time.Second, "a verdict on generation 2", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKey{Name: "refusing"}, src); err != nil {
			return false, err
		}
		c := apimeta.FindStatusCondition(src.Status.Conditions, "Ready")
		return src.Generation == 2 && c != nil && c.ObservedGeneration == 2, nil
	})
	for range 10 { // and so it stays while the reconciles fail
		if s := testenv.KStatusOf(t, src); s != kstatus.InProgressStatus {
			t.Fatalf("generation %d, its reconciles failing: kstatus %s, want %s (observedGeneration %d, %+v)",
				src.Generation, s, kstatus.InProgressStatus, src.Status.ObservedGeneration, src.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
		if err := kube.Get(ctx, client.ObjectKey{Name: "refusing"}, src); err != nil {
			t.Fatal(err)
		}
	}

	if err := lift(ctx); err != nil {
		t.Fatal(err)
	}
	src = waitSource(t, "refusing", "Ready", "Succeeded")
	if s := testenv.KStatusOf(t, src); s != kstatus.CurrentStatus || len(src.Status.Definitions) != 1 || src.Status.Definitions[0] != "refusedkvs" {
		t.Errorf("generation 2 reconciled: kstatus %s, definitions %v", s, src.Status.Definitions)
	}
}
