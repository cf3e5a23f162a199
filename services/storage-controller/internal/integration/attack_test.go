package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// asTenantAdmin is acme's tenant administrator (the group OIDC gives), with the tenant admin role
// in namespace ns as the tenant-controller binds it.
func asTenantAdmin(t *testing.T, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:tenant:admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "tenant-acme-admin"}},
	}
	if err := k8s.Create(ctx, rb); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	c, err := env.As("alice@acme.example", "tenant-acme-admin")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the tenant role aggregated", func() (bool, error) {
		err := c.List(ctx, &corev1.PodList{}, client.InNamespace(ns))
		return err == nil, err
	})
	return c
}

// A tenant administrator cannot make or change storage policies or scheduling classes (they are
// the platform's), cannot place a claim that does not fit, cannot leave the tenant's scheduling
// class, and cannot release a pod held for a missing class.
func TestAttackTenantAdminCannotCrossStorageBoundaries(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	zonedNodes(t)
	schedulingClass(t, "acme-fence", storagepolicyv1.SchedulingClassSpec{NodeSelector: map[string]string{"topology.kubernetes.io/zone": "c"}})
	ns := classedNamespace(t, "tenant-acme-attack", "acme-fence")
	acme := asTenantAdmin(t, ns)

	if err := acme.Create(ctx, replicated("acme-own")); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a tenant admin made a StoragePolicy (%v)", err)
	}
	if err := acme.Create(ctx, &storagepolicyv1.SchedulingClass{ObjectMeta: metav1.ObjectMeta{Name: "acme-anywhere"}}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a tenant admin made a SchedulingClass (%v)", err)
	}

	create(t, replicated("acme-fit"))
	condition(t, "acme-fit", "Ready", metav1.ConditionTrue, "")
	if err := acme.Create(ctx, claim(ns, "huge", "acme-fit", "1Ti")); err == nil || !strings.Contains(err.Error(), "the largest free") {
		t.Errorf("a tenant admin's claim that cannot fit: %v", err)
	}

	p := webPod(ns, "escape")
	p.Annotations = map[string]string{storagepolicyv1.AnnotationSchedulingClass: "none-at-all"}
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-1"}
	err := acme.Create(ctx, p)
	if err == nil {
		t.Cleanup(func() { _ = k8s.Delete(ctx, p, client.GracePeriodSeconds(0)) })
		if p.Spec.NodeSelector["topology.kubernetes.io/zone"] != "c" {
			t.Errorf("a tenant admin's pod left the tenant's class: nodeSelector %v", p.Spec.NodeSelector)
		}
	}

	// A pod held for a class that does not exist stays held.
	plain := namespace(t, "tenant-acme-plain")
	acme = asTenantAdmin(t, plain)
	held := webPod(plain, "held")
	held.Annotations = map[string]string{storagepolicyv1.AnnotationSchedulingClass: "not-there"}
	if err := acme.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, held, client.GracePeriodSeconds(0)) })
	held.Spec.SchedulingGates = nil
	err = acme.Update(ctx, held)
	if err == nil || !strings.Contains(err.Error(), "spec.schedulingGates") || !strings.Contains(err.Error(), "not-there") {
		t.Errorf("a tenant admin lifted the scheduling gate of a held pod (%v)", err)
	}
}
