package validation_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// A tenant's administrator, as the tenant-controller binds one, manages the tenant's
// TenantNetworks but cannot hand itself addresses (their status) nor touch the platform's kinds.
func TestATenantAdminManagesNetworksButNotTheirAddresses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	charts := filepath.Join("..", "..", "..", "..", "deploy", "charts")
	for _, f := range []string{filepath.Join(charts, "tenant-controller", "templates", "tenant-roles.yaml"),
		filepath.Join(charts, "net-controller", "templates", "tenant-roles.yaml")} {
		if err := testenv.ApplyFile(ctx, k8s, f); err != nil {
			t.Fatal(err)
		}
	}
	ns := "tenant-access"
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:tenant:admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	}))
	alice, err := env.As("alice")
	must(t, err)

	n := network(func(n *netv1.TenantNetwork) { n.Namespace = ns })
	// The aggregation controller fills the tenant roles in a moment after they are applied.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := alice.Create(ctx, n.DeepCopy())
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("a tenant admin creating a TenantNetwork: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cur := &netv1.TenantNetwork{}
	must(t, alice.Get(ctx, client.ObjectKeyFromObject(n), cur))
	cur.Status.SNATIP = "100.64.0.9"
	if err := alice.Status().Update(ctx, cur); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant admin writing a TenantNetwork's addresses: %v, want Forbidden", err)
	}
	pool := &netv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: netv1.SubnetPoolSpec{
		IPv4: &netv1.BlockRange{CIDRs: []string{"10.0.0.0/8"}, BlockPrefixLength: 24}}}
	if err := alice.Create(ctx, pool); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant admin creating a SubnetPool: %v, want Forbidden", err)
	}
	rp := policy(func(*netv1.RoutingPolicy) {})
	if err := alice.Create(ctx, rp); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant admin creating a RoutingPolicy: %v, want Forbidden", err)
	}
	must(t, alice.Delete(ctx, cur))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
