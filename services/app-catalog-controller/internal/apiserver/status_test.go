package apiserver

import (
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// An app's status through its release's life: helm-controller's word counts only for the current
// generation, and pods that cannot start keep the app from being Ready whether helm-controller
// still waits for them (a definition's readiness) or has installed the release.
func TestAppStatus(t *testing.T) {
	k := starterKind(t, "redis")
	const podsFail = "pod redis-x-0 cannot be scheduled: 0/1 nodes are available"
	ready := func(s metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
		return metav1.Condition{Type: meta.ReadyCondition, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
	}
	for _, tc := range []struct {
		name       string
		observed   int64
		conditions []metav1.Condition
		workloads  string
		starting   string
		// want: Ready's status and reason, whether Reconciling is true, the message, observedGeneration.
		status    metav1.ConditionStatus
		reason    string
		msg       string
		observedG int64
	}{
		{name: "new", status: metav1.ConditionUnknown, reason: meta.ProgressingReason,
			msg: "waiting for helm-controller to act on generation 2"},
		{name: "helm-controller waits for the pods", observed: 1,
			conditions: []metav1.Condition{ready(metav1.ConditionUnknown, "Progressing", "Running 'install' action with timeout of 5m0s", 2)},
			status:     metav1.ConditionUnknown, reason: "Progressing", msg: "Running 'install' action with timeout of 5m0s"},
		{name: "helm-controller waits for pods that cannot start", observed: 1, workloads: podsFail,
			conditions: []metav1.Condition{ready(metav1.ConditionUnknown, "Progressing", "Running 'install' action with timeout of 5m0s", 2)},
			status:     metav1.ConditionFalse, reason: catalogv1.PodsCannotStartReason, msg: podsFail},
		{name: "the last generation's verdict", observed: 1,
			conditions: []metav1.Condition{ready(metav1.ConditionTrue, "UpgradeSucceeded", "done", 1)},
			status:     metav1.ConditionUnknown, reason: meta.ProgressingReason, msg: "waiting for helm-controller to act on generation 2"},
		{name: "installed", observed: 2,
			conditions: []metav1.Condition{ready(metav1.ConditionTrue, "InstallSucceeded", "Helm install succeeded", 2)},
			status:     metav1.ConditionTrue, reason: "InstallSucceeded", msg: "Helm install succeeded", observedG: 2},
		{name: "installed, pods cannot start", observed: 2, workloads: podsFail,
			conditions: []metav1.Condition{ready(metav1.ConditionTrue, "InstallSucceeded", "Helm install succeeded", 2)},
			status:     metav1.ConditionFalse, reason: catalogv1.PodsCannotStartReason, msg: podsFail},
		{name: "installed, starting", observed: 2, starting: "waiting for StatefulSet redis-x: Ready: 0/1",
			conditions: []metav1.Condition{ready(metav1.ConditionTrue, "InstallSucceeded", "Helm install succeeded", 2)},
			status:     metav1.ConditionFalse, reason: catalogv1.PodsStartingReason, msg: "waiting for StatefulSet redis-x: Ready: 0/1"},
		{name: "installing, starting", observed: 1, starting: StartingMessage,
			conditions: []metav1.Condition{ready(metav1.ConditionUnknown, "Progressing", "Running 'upgrade' action with timeout of 5m0s", 2)},
			status:     metav1.ConditionUnknown, reason: "Progressing", msg: "Running 'upgrade' action with timeout of 5m0s"},
		{name: "the install failed, pods cannot start", observed: 2, workloads: podsFail,
			conditions: []metav1.Condition{ready(metav1.ConditionFalse, "InstallFailed", "context deadline exceeded", 2)},
			status:     metav1.ConditionFalse, reason: catalogv1.PodsCannotStartReason, msg: podsFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "redis-x", Generation: 2}}
			hr.Status.ObservedGeneration, hr.Status.Conditions = tc.observed, tc.conditions
			hr.Annotations = map[string]string{catalogv1.AnnotationWorkloads: tc.workloads, catalogv1.AnnotationStarting: tc.starting}
			st := appStatus(k, hr)
			var got metav1.Condition
			reconciling := false
			for _, c := range st.Conditions {
				switch c.Type {
				case meta.ReadyCondition:
					got = c
				case meta.ReconcilingCondition:
					reconciling = c.Status == metav1.ConditionTrue
				}
			}
			if got.Status != tc.status || got.Reason != tc.reason || st.Message != tc.msg || st.ObservedGeneration != tc.observedG {
				t.Errorf("Ready %s (%s), message %q, observedGeneration %d; want %s (%s), %q, %d",
					got.Status, got.Reason, st.Message, st.ObservedGeneration, tc.status, tc.reason, tc.msg, tc.observedG)
			}
			if want := tc.status != metav1.ConditionTrue; reconciling != want {
				t.Errorf("Reconciling %v, want %v", reconciling, want)
			}
		})
	}
}

// An app whose definition asks for readiness starts anew with each change of its release's spec,
// and only then: a repeated apply leaves a Ready app Ready.
func TestStartingAnnotation(t *testing.T) {
	k := starterKind(t, "redis")
	if !k.Definition.Spec.Readiness.Waits() {
		t.Fatal("the starter Redis does not wait for its pods")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-acme"}}
	app := newApp(k, map[string]any{})
	k.Default(app.Object)
	hr := &helmv2.HelmRelease{}
	if err := toHelmRelease(k, app, ns, "", hr); err != nil {
		t.Fatal(err)
	}
	if got := hr.Annotations[catalogv1.AnnotationStarting]; got != StartingMessage {
		t.Fatalf("a new app: starting %q, want %q", got, StartingMessage)
	}
	delete(hr.Annotations, catalogv1.AnnotationStarting) // judged ready
	if err := toHelmRelease(k, app, ns, "", hr); err != nil {
		t.Fatal(err)
	}
	if got, ok := hr.Annotations[catalogv1.AnnotationStarting]; ok {
		t.Fatalf("the same app applied again: starting %q, want none", got)
	}
	unstructured.SetNestedField(app.Object, int64(2), "spec", "replicas")
	if err := toHelmRelease(k, app, ns, "", hr); err != nil {
		t.Fatal(err)
	}
	if got := hr.Annotations[catalogv1.AnnotationStarting]; got != StartingMessage {
		t.Fatalf("a changed app: starting %q, want %q", got, StartingMessage)
	}
}
