package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/webhook"
)

func namespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	return name
}

func claim(ns, name, class, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// createClaim creates c, and deletes it when the test ends: a claim left behind would be in the
// way of the same test run again (-count), and of nothing else.
func createClaim(t *testing.T, c *corev1.PersistentVolumeClaim) error {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, c); err != nil {
		return err
	}
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, c)
		eventually(t, 30*time.Second, "claim "+c.Namespace+"/"+c.Name+" gone", func() (bool, error) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(c), &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
	return nil
}

// judged waits until kube-apiserver calls the claim webhook for class: a policy is Ready once the
// webhook's match condition names its class, but kube-apiserver's admission sees the changed
// configuration moments later, and a claim admitted before then is never judged. The probe is a
// dry run of a claim too large for any node, so nothing is left behind.
func judged(t *testing.T, ns, class string) {
	t.Helper()
	eventually(t, 30*time.Second, "the claim webhook to judge claims of class "+class, func() (bool, error) {
		err := k8s.Create(context.Background(), claim(ns, "probe", class, "1Pi"), client.DryRunAll)
		return apierrors.IsInvalid(err), err
	})
}

// tenantAdmin is a client acting as user, allowed to manage claims in ns only (what a tenant
// admin's role grants of them).
func tenantAdmin(t *testing.T, ns, user string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"*"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	c, err := env.As(user)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A claim of a policy's StorageClass that no qualifying set of nodes can hold is refused at once,
// with the numbers and the field; one that fits, and claims of other classes, are admitted.
func TestOversizeClaimIsRefused(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	ns := namespace(t, "claims")
	create(t, replicated("fit"))
	condition(t, "fit", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	judged(t, ns, "fit")

	err := k8s.Create(ctx, claim(ns, "huge", "fit", "200Gi"))
	if err == nil {
		t.Fatal("a 200Gi claim was admitted where at most 100Gi fits")
	}
	for _, want := range []string{"spec.resources.requests.storage", "2 replicas of 200Gi: the largest free on 2 distinct zones is 100Gi (node-"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	// Value() of a quantity beyond an int64 of bytes answers 0 or wraps below zero: such a claim
	// would fit anywhere if its size were taken from it. Tried from a tenant admin's seat: mallory
	// may create claims in her namespace, and nothing more.
	mallory := tenantAdmin(t, ns, "mallory")
	for i, size := range []string{"9223372036854775808", "1e30", "1e100000"} {
		c := claim(ns, fmt.Sprintf("beyond-%d", i), "fit", size)
		err := mallory.Create(ctx, c)
		if err == nil {
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), c) })
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.resources.requests.storage") {
			t.Errorf("mallory's claim of %s: %v, want it refused naming its size", size, err)
		}
	}
	if err := createClaim(t, claim(ns, "fits", "fit", "100Gi")); err != nil {
		t.Errorf("a claim that fits: %v", err)
	}
	if err := createClaim(t, claim(ns, "elsewhere", "someone-elses", "1Pi")); err != nil {
		t.Errorf("a claim of another class: %v", err)
	}
}

// The claim webhook reads a StorageClass or StoragePolicy its cache has not seen yet from the API
// server: a claim of a class made moments ago is checked, not admitted as another class's.
func TestClaimValidatorReadsWhatItsCacheHasNotSeen(t *testing.T) {
	ownLINSTOR(t)
	create(t, replicated("unseen-fit"))
	condition(t, "unseen-fit", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	v := &webhook.ClaimValidator{Reader: unseeingCache(t), APIReader: k8s, View: view}
	_, err := v.ValidateCreate(context.Background(), claim("claims", "huge", "unseen-fit", "200Gi"))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.resources.requests.storage") {
		t.Errorf("a 200Gi claim where at most 100Gi fits: %v, want it invalid", err)
	}
}

// A resize must fit where the volume's replicas are: each grows in its own pool.
func TestOversizeResizeIsRefused(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	ns := namespace(t, "claims")
	create(t, replicated("grows"))
	condition(t, "grows", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	judged(t, ns, "grows")
	if err := raw.ResourceGroups.Spawn(ctx, "flotilla-grows", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-grows", VolumeSizes: []int64{50 * gib}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.ResourceDefinitions.Delete(ctx, "pvc-grows") })
	if err := createPV(t, csiVolume("pvc-grows", "grows", "50Gi")); err != nil {
		t.Fatal(err)
	}
	pvc := claim(ns, "grows", "grows", "50Gi")
	pvc.Spec.VolumeName = "pvc-grows"
	if err := createClaim(t, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("50Gi")}
	if err := k8s.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	resize := func(size string) error {
		p := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pvc), p); err != nil {
			return err
		}
		p.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		return k8s.Update(ctx, p)
	}
	// Each replica's node has 50Gi left: growing by 70Gi cannot fit, though 120Gi would fit new.
	var refusal error
	eventually(t, 10*time.Second, "resize to 120Gi refused for capacity", func() (bool, error) {
		refusal = resize("120Gi")
		return refusal != nil && strings.Contains(refusal.Error(), "resize by 70Gi"), refusal
	})
	if !strings.Contains(refusal.Error(), "has 50Gi free in storage pool ssd") {
		t.Errorf("refusal does not say what is free: %v", refusal)
	}
	if err := resize("1e30"); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "the largest int64") {
		t.Errorf("a resize to 1e30 bytes: %v, want it refused as beyond an int64", err)
	}
	if err := resize("80Gi"); err != nil {
		t.Errorf("a resize that fits: %v", err)
	}
}

// Only claims of Flotilla's classes reach the webhook: with the webhook unreachable (the
// storage-controller down), they are refused while claims of other classes are admitted.
func TestClaimWebhookFailsClosedForOurClassesOnly(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	ns := namespace(t, "claims")
	create(t, replicated("closed"))
	condition(t, "closed", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: webhookConfig}, live); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(live.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return w.Name == webhook.Name })
	conds := live.Webhooks[i].MatchConditions
	if len(conds) != 1 || conds[0].Name != storage.MatchConditionName || !strings.Contains(conds[0].Expression, "'closed'") {
		t.Fatalf("match conditions of the claim webhook: %+v", conds)
	}
	// The same webhook, served by nobody.
	down := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "storage-controller-down"}}
	hook := live.Webhooks[i].DeepCopy()
	hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/validate"), CABundle: hook.ClientConfig.CABundle}
	down.Webhooks = []admissionregistrationv1.ValidatingWebhook{*hook}
	if err := k8s.Create(ctx, down); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, down)
		eventually(t, 10*time.Second, "claims of Flotilla's classes admitted again", func() (bool, error) {
			c := claim(ns, "ours-again", "closed", "1Gi")
			err := k8s.Create(ctx, c)
			_ = k8s.Delete(ctx, c)
			return err == nil, err
		})
	})
	// kube-apiserver picks a new webhook configuration up within moments, not at once.
	eventually(t, 10*time.Second, "a claim of a Flotilla class refused with its webhook down", func() (bool, error) {
		c := claim(ns, "ours-while-down", "closed", "1Gi")
		err := k8s.Create(ctx, c)
		if err == nil {
			_ = k8s.Delete(ctx, c)
			return false, nil
		}
		return strings.Contains(err.Error(), "127.0.0.1:1"), err
	})
	if err := createClaim(t, claim(ns, "theirs-while-down", "standard", "1Gi")); err != nil {
		t.Errorf("a claim of another class was refused with Flotilla's webhook down: %v", err)
	}
	if err := createClaim(t, claim(ns, "no-class-while-down", "", "1Gi")); err != nil {
		t.Errorf("a claim without a class was refused with Flotilla's webhook down: %v", err)
	}
}
