package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// An app whose release is installed but whose pods cannot start is not Ready, and says why in
// the scheduler's words; an update of the app keeps saying so; once the pods can start (here:
// the failing one is gone) it is Ready again. The failing pod is one the real kube-scheduler
// finds no node for (no node runs here): a pod of the app's release that names a scheduler of
// its own, so that the suite's other pods are left as they are.
func TestAppNotReadyWhileItsPodsCannotStart(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "redis")
	ns := tenantNamespace(t, "podsfail")
	if out, err := kubectl(t, "apiVersion: apps.flotilla.dev/v1alpha1\nkind: Redis\nmetadata: {name: stuck, namespace: "+ns+"}\nspec: {}\n", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "wait", "-n", ns, "redis/stuck", "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatalf("the app before any pod fails: %v\n%s", err, out)
	}
	sched, err := env.StartScheduler(t.TempDir(), testenv.SchedulerOptions{SchedulerName: "podsfail"})
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stuck-extra", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/instance": "redis-stuck"}},
		Spec: corev1.PodSpec{SchedulerName: "podsfail", Containers: []corev1.Container{{Name: "c", Image: "busybox",
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}}}},
	}
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, pod) })

	failing := func(what string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() (bool, error) {
			app, err := apps.Resource(redises).Namespace(ns).Get(ctx, "stuck", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ready := readyOf(app)
			return ready.Reason == catalogv1.PodsCannotStartReason && ready.Status == metav1.ConditionFalse &&
				ready.Message == "pod stuck-extra cannot be scheduled: no nodes available to schedule pods" &&
				testenv.KStatusOf(t, app) == kstatus.InProgressStatus, nil
		})
	}
	failing("the app not Ready, naming the pod the scheduler cannot place")
	// A change of the app's spec: a new generation of its release, which still cannot start.
	if out, err := kubectl(t, "", "patch", "-n", ns, "redis/stuck", "--type=merge", "-p", `{"spec":{"appendOnly":false}}`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	failing("the updated app still not Ready, for the same reason")

	if err := kube.Delete(ctx, pod, &client.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", ns, "redis/stuck", "--for=condition=Ready", "--timeout=60s"); err != nil {
		t.Fatalf("the app once its pods can start: %v\n%s", err, out)
	}
}

var redises = schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "redises"}

// readyOf is an app's Ready condition.
func readyOf(app *unstructured.Unstructured) metav1.Condition {
	var c metav1.Condition
	conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
	for _, raw := range conds {
		m, _ := raw.(map[string]any)
		if m["type"] == fmeta.ReadyCondition {
			c.Type, c.Reason, c.Message = fmeta.ReadyCondition, m["reason"].(string), m["message"].(string)
			c.Status = metav1.ConditionStatus(m["status"].(string))
		}
	}
	return c
}
