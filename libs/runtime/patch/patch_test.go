package patch_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// A status write for an object that is gone is no error: the reconcile that read it has nothing
// left to report. Other failures are errors.
func TestStatusOfAnObjectThatIsGone(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	gone := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}
	h := patch.NewHelper(gone)
	gone.Status.Phase = corev1.NamespaceTerminating
	if wrote, err := h.Status(ctx, env.Client, gone); err != nil || wrote {
		t.Fatalf("status of a missing object: wrote=%v err=%v, want neither", wrote, err)
	}

	here := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "here"}}
	if err := env.Client.Create(ctx, here); err != nil {
		t.Fatal(err)
	}
	nobody, err := env.As("nobody")
	if err != nil {
		t.Fatal(err)
	}
	h = patch.NewHelper(here)
	here.Status.Phase = corev1.NamespaceTerminating
	if _, err := h.Status(ctx, nobody, here); err == nil {
		t.Fatal("a forbidden status write reported no error")
	}
}

// StatusIfCurrent writes nothing for an object changed since it was read, and says so with a
// Conflict; from the latest copy it writes.
func TestStatusIfCurrentRefusesAStaleCopy(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	stale := ns.DeepCopy()
	ns.Labels = map[string]string{"changed": "since"}
	if err := env.Client.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}

	h := patch.NewHelper(stale)
	stale.Status.Conditions = []corev1.NamespaceCondition{{Type: "Tested", Status: corev1.ConditionTrue}}
	if wrote, err := h.StatusIfCurrent(ctx, env.Client, stale); !apierrors.IsConflict(err) || wrote {
		t.Fatalf("status from a stale copy: wrote=%v err=%v, want a Conflict", wrote, err)
	}

	h = patch.NewHelper(ns)
	ns.Status.Conditions = []corev1.NamespaceCondition{{Type: "Tested", Status: corev1.ConditionTrue}}
	if wrote, err := h.StatusIfCurrent(ctx, env.Client, ns); err != nil || !wrote {
		t.Fatalf("status from the latest copy: wrote=%v err=%v, want a write", wrote, err)
	}
}
