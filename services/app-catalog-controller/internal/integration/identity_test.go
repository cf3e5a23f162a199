package integration

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// An app is installed as its own identity. One whose HelmRelease still names the identity earlier
// versions installed every app of a tenant as (flotilla-delivery, as an upgraded platform finds
// it) is moved to its own without being reinstalled: helm-controller upgrades nothing (the release
// keeps its one revision, its StatefulSet stays the same object), and the app's next change is
// installed as its own identity.
func TestAppsMoveToTheirOwnIdentity(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "redis")
	acme := tenantNamespace(t, "moveacme")
	mallory := tenantAdmin(t, acme, "mallory")
	redises := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "redises"}
	if _, err := mallory.Resource(redises).Namespace(acme).Create(ctx, appObject("Redis", acme, "cache", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", acme, "redis/cache", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	key := client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(acme), Name: "redis-cache"}
	hr := &helmv2.HelmRelease{}
	if err := kube.Get(ctx, key, hr); err != nil {
		t.Fatal(err)
	}
	if hr.Spec.ServiceAccountName != hr.Name {
		t.Fatalf("a new app is installed as %q, not as its own identity %q", hr.Spec.ServiceAccountName, hr.Name)
	}
	set := &appsv1.StatefulSet{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: acme, Name: "redis-cache"}, set); err != nil {
		t.Fatal(err)
	}
	revisions := func() int {
		records := &corev1.SecretList{}
		if err := kube.List(ctx, records, client.InNamespace(key.Namespace), client.MatchingLabels{"owner": "helm", "name": key.Name}); err != nil {
			t.Fatal(err)
		}
		return len(records.Items)
	}
	settled := func(hr *helmv2.HelmRelease) bool {
		return hr.Status.ObservedGeneration == hr.Generation && apimeta.IsStatusConditionTrue(hr.Status.Conditions, "Ready")
	}

	// The HelmRelease as the previous version wrote it.
	if err := kube.Patch(ctx, hr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"serviceAccountName":"flotilla-delivery"}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the app to be moved to its own identity", func() (bool, error) {
		err := kube.Get(ctx, key, hr)
		return err == nil && hr.Spec.ServiceAccountName == hr.Name && settled(hr), err
	})
	if n := revisions(); n != 1 {
		t.Fatalf("moving the app made %d revisions of its release; want the one it had", n)
	}
	moved := &appsv1.StatefulSet{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(set), moved); err != nil || moved.UID != set.UID {
		t.Fatalf("moving the app replaced its StatefulSet: %v", err)
	}

	// Its next change, installed as its own identity (which holds the objects the old one made:
	// helm-controller labelled them with the HelmRelease).
	if _, err := mallory.Resource(redises).Namespace(acme).Patch(ctx, "cache", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the change to be installed", func() (bool, error) {
		err := kube.Get(ctx, key, hr)
		return err == nil && settled(hr) && revisions() == 2, err
	})
	if err := kube.Get(ctx, client.ObjectKeyFromObject(set), moved); err != nil || moved.UID != set.UID || *moved.Spec.Replicas != 2 {
		t.Fatalf("the change as the app's own identity: %v %v", err, moved.Spec.Replicas)
	}
}
