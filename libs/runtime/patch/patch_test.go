package patch_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
