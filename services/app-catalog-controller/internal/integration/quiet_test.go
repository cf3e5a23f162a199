package integration

import (
	"context"
	"testing"
	"time"

	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver"
)

// With the catalog unchanged, the apps apiserver writes nothing: it stamps its APIService (to
// make the aggregator refresh discovery) only when what it serves changes.
func TestAppsAPIServerIsQuietAtSteadyState(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	svc := &apiregistrationv1.APIService{}
	eventually(t, 10*time.Second, "the APIService to carry the discovery hash", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: apiserver.APIServiceName}, svc)
		return err == nil && svc.Annotations[apiserver.AnnotationDiscovery] != "", err
	})
	time.Sleep(time.Second) // let the aggregator's own status writes settle
	if err := kube.Get(ctx, client.ObjectKey{Name: apiserver.APIServiceName}, svc); err != nil {
		t.Fatal(err)
	}
	before := svc.ResourceVersion
	time.Sleep(3 * time.Second)
	if err := kube.Get(ctx, client.ObjectKey{Name: apiserver.APIServiceName}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.ResourceVersion != before {
		t.Fatalf("the APIService was written at steady state (%s → %s)", before, svc.ResourceVersion)
	}
}
