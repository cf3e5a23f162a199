package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A tenant that hosts its own etcd gets the starter catalog's Etcd, ordered through the apps API
// and installed through Flux like any app: its admins see it from their seat, and it is ordered
// again when deleted. A tenant using its parent's etcd gets none.
func TestTenantServiceIsOrdered(t *testing.T) {
	ctx := context.Background()
	def := installDefinition(t, "etcd")
	if def.Spec.TenantService != "etcd" {
		t.Fatalf("the starter Etcd definition provides %q, not etcd", def.Spec.TenantService)
	}
	host := tenantNamespaceWith(t, "etcdhost", tenancyv1.TenantSpec{Etcd: true})
	user := tenantNamespace(t, "etcduser")
	etcds := apps.Resource(schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "etcds"})

	var uid string
	eventually(t, 60*time.Second, "the host's etcd ordered", func() (bool, error) {
		app, err := etcds.Namespace(host).Get(ctx, "etcd", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		uid = string(app.GetUID())
		return true, nil
	})
	if out, err := kubectl(t, "", "wait", "-n", host, "etcds.apps.flotilla.dev/etcd", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	// From the tenant admin's seat.
	out, err := kubectl(t, "", "get", "etcds.apps.flotilla.dev", "-n", host, "--as", "host-admin", "--as-group", host+"-admin", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "etcd.apps.flotilla.dev/etcd" {
		t.Fatalf("the tenant admin's kubectl get etcds: %v\n%s", err, out)
	}
	// The tenant using its parent's etcd: nothing ordered (its namespace was reconciled before the
	// host's order was seen: both were Ready before the wait above).
	if _, err := etcds.Namespace(user).Get(ctx, "etcd", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an etcd in %s, whose tenant uses its parent's: %v", user, err)
	}

	// Deleted by its admin: ordered again.
	if out, err := kubectl(t, "", "delete", "etcds.apps.flotilla.dev/etcd", "-n", host, "--as", "host-admin", "--as-group", host+"-admin", "--wait=false"); err != nil {
		t.Fatalf("the tenant admin's kubectl delete: %v\n%s", err, out)
	}
	eventually(t, 60*time.Second, "the host's etcd ordered again", func() (bool, error) {
		app, err := etcds.Namespace(host).Get(ctx, "etcd", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && string(app.GetUID()) != uid && app.GetDeletionTimestamp() == nil, err
	})
}
