package status_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/internal/widget"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// Against a real API server: the first Ready and each later flip are written and announced once;
// a converged reconcile writes nothing; a reconcile from a stale copy writes nothing, announces
// nothing and looks again.
func TestFinish(t *testing.T) {
	ctx, k8s, mgr := start(t)
	w := status.Writer{Client: k8s, Recorder: mgr.GetEventRecorder("status-test"), Domain: []string{"Built"}}

	obj := &widget.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: map[string]string{"a": "b"}}
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// reconcile runs Finish the way a reconciler defers it, on a copy read at rv, with Built set
	// to built; it returns what was written.
	reconcile := func(read *widget.Widget, built metav1.ConditionStatus) (ctrl.Result, *widget.Widget) {
		t.Helper()
		obj := read.DeepCopyObject().(*widget.Widget)
		helper := patch.NewHelper(obj)
		conditions.Set(obj, "Built", built, "Test", "built is "+string(built))
		var res ctrl.Result
		var err error
		w.Finish(ctx, helper, obj, nil, &res, &err)
		if err != nil {
			t.Fatalf("Finish: %v", err)
		}
		now := &widget.Widget{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), now); err != nil {
			t.Fatal(err)
		}
		return res, now
	}

	fresh := obj.DeepCopyObject().(*widget.Widget)
	_, ready := reconcile(fresh, metav1.ConditionTrue)
	if !conditions.IsReady(ready) {
		t.Fatalf("first reconcile: not Ready: %+v", ready.Status)
	}
	if _, again := reconcile(ready, metav1.ConditionTrue); again.ResourceVersion != ready.ResourceVersion {
		t.Errorf("a converged reconcile wrote: resourceVersion %s → %s", ready.ResourceVersion, again.ResourceVersion)
	}
	// The copy the cache held before the first write: it would write Ready again and announce it.
	res, after := reconcile(fresh, metav1.ConditionTrue)
	if after.ResourceVersion != ready.ResourceVersion {
		t.Errorf("a reconcile from a stale copy wrote: resourceVersion %s → %s", ready.ResourceVersion, after.ResourceVersion)
	}
	if res.RequeueAfter != status.StaleRequeue {
		t.Errorf("a reconcile from a stale copy: requeue after %v, want %v", res.RequeueAfter, status.StaleRequeue)
	}
	// The same stale copy, judged a spec a human must fix: controller-runtime never retries a
	// terminal error, and a status write does not pass a GenerationChangedPredicate, so unless the
	// stale verdict is dropped for another look, the object never shows it.
	stale := fresh.DeepCopyObject().(*widget.Widget)
	staleRes, staleErr := ctrl.Result{}, error(crreconcile.TerminalError(errors.New("a spec a human must fix")))
	w.Finish(ctx, patch.NewHelper(stale), stale, &conditions.Stall{Reason: "Invalid", Message: "fix it"}, &staleRes, &staleErr)
	if staleErr != nil || staleRes.RequeueAfter != status.StaleRequeue {
		t.Errorf("a terminal error from a stale copy: result %+v, error %v; want another look after %v and no error", staleRes, staleErr, status.StaleRequeue)
	}
	failingRes, failing := reconcile(ready, metav1.ConditionFalse)
	if conditions.IsTrue(failing, "Ready") {
		t.Errorf("Built=False: still Ready")
	}
	if !failingRes.IsZero() {
		t.Errorf("a reconcile from the current copy: result %+v, want none", failingRes)
	}
	// The copy the cache held before that write, judged Built=True again: its status is the one
	// it read, so there is nothing to patch, yet the object shows the write it has not seen. Unless
	// it looks again, nothing brings the object back (the write it missed passes no
	// GenerationChangedPredicate) and it stays not Ready for good.
	if res, after := reconcile(ready, metav1.ConditionTrue); res.RequeueAfter != status.StaleRequeue || after.ResourceVersion != failing.ResourceVersion {
		t.Errorf("a stale copy behind this process's own write: result %+v, resourceVersion %s → %s; want another look after %v and no write",
			res, failing.ResourceVersion, after.ResourceVersion, status.StaleRequeue)
	}
	if res, again := reconcile(failing, metav1.ConditionTrue); !res.IsZero() || !conditions.IsReady(again) {
		t.Errorf("once the copy is current: result %+v, Ready %v", res, conditions.IsReady(again))
	}

	// One Event for the first Ready, one for each flip, none for the rest. The recorder sends them
	// in the background: wait for two, then a little longer for any other. Only the widget's count
	// (kube-apiserver records its own, ClusterIPNotAllocated when it starts slowly, say).
	events := func() []eventsv1.Event {
		list := &eventsv1.EventList{}
		if err := k8s.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(list.Items, func(e eventsv1.Event) bool { return e.Regarding.UID != obj.UID })
	}
	for deadline := time.Now().Add(30 * time.Second); len(events()) < 2 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	got := map[string]int{}
	for _, e := range events() {
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		got[e.Regarding.Name+" "+e.Type+" "+e.Reason] += n
	}
	if want := map[string]int{"w Normal Succeeded": 2, "w Warning Test": 1}; !maps.Equal(got, want) {
		t.Errorf("events: %v, want %v", got, want)
	}
}

// start runs a real API server with the Widget kind, and a manager for its event recorder.
func start(t *testing.T) (context.Context, client.Client, ctrl.Manager) {
	t.Helper()
	scheme := widget.Scheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dir, err := widget.CRDDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.Options{Scheme: scheme, CRDDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = mgr.Start(ctx) }()
	return ctx, env.Client, mgr
}

// Against a real API server, judged by kstatus as Flux, kubectl wait and Argo CD judge: a
// reconcile of a new generation that fails never makes the object Current for it, whether it failed
// before its domain conditions were evaluated again or after; the next reconcile that finishes
// does. A failure once the generation is finished leaves Ready as it was. A stall ends in a
// terminal error and kstatus Failed.
func TestAFailedReconcileIsNeverReadyForItsGeneration(t *testing.T) {
	ctx, k8s, _ := start(t)
	w := status.Writer{Client: k8s, Domain: []string{"Built", "Shipped"}}
	obj := &widget.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: map[string]string{"a": "b"}}
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// reconcile reads the widget, runs evaluate on it (which sets domain conditions and says how the
	// reconcile ended) and Finish, as a reconciler's deferred status write does; it returns the
	// reconcile's outcome and the widget as stored after it.
	reconcile := func(stall *conditions.Stall, evaluate func(*widget.Widget) error) (ctrl.Result, error, *widget.Widget) {
		t.Helper()
		obj := &widget.Widget{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "w"}, obj); err != nil {
			t.Fatal(err)
		}
		helper := patch.NewHelper(obj)
		var res ctrl.Result
		err := evaluate(obj)
		w.Finish(ctx, helper, obj, stall, &res, &err)
		now := &widget.Widget{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "w"}, now); err != nil {
			t.Fatal(err)
		}
		return res, err, now
	}
	all := func(obj *widget.Widget) error {
		conditions.MarkTrue(obj, "Built", "Test", "built")
		conditions.MarkTrue(obj, "Shipped", "Test", "shipped")
		return nil
	}
	failed := errors.New("listing the parts: connection refused")
	changeSpec := func(v string) {
		t.Helper()
		obj := &widget.Widget{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "w"}, obj); err != nil {
			t.Fatal(err)
		}
		obj.Spec = map[string]string{"a": v}
		if err := k8s.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, got *widget.Widget, want kstatus.Status) {
		t.Helper()
		if s := testenv.KStatusOf(t, got); s != want {
			t.Errorf("%s: kstatus %s, want %s (generation %d, observedGeneration %d, %+v)",
				what, s, want, got.Generation, got.Status.ObservedGeneration, got.Status.Conditions)
		}
	}

	_, _, got := reconcile(nil, all)
	expect("generation 1 reconciled", got, kstatus.CurrentStatus)

	changeSpec("c")
	_, err, got := reconcile(nil, func(*widget.Widget) error { return failed })
	expect("generation 2, failed before evaluating anything", got, kstatus.InProgressStatus)
	if conditions.IsTrue(got, "Ready") || got.Status.ObservedGeneration != 1 || !errors.Is(err, failed) {
		t.Errorf("generation 2, failed before evaluating anything: Ready %+v, observedGeneration %d, error %v",
			conditions.Get(got, "Ready"), got.Status.ObservedGeneration, err)
	}
	_, _, got = reconcile(nil, func(obj *widget.Widget) error { conditions.MarkTrue(obj, "Built", "Test", "built"); return failed })
	expect("generation 2, failed after evaluating one condition", got, kstatus.InProgressStatus)
	_, _, got = reconcile(nil, func(obj *widget.Widget) error { _ = all(obj); return failed })
	expect("generation 2, every condition evaluated, then failed", got, kstatus.InProgressStatus)
	_, _, got = reconcile(nil, all)
	expect("generation 2 reconciled", got, kstatus.CurrentStatus)
	_, _, got = reconcile(nil, func(obj *widget.Widget) error { _ = all(obj); return failed })
	expect("generation 2 reconciled, then a reconcile failed", got, kstatus.CurrentStatus)

	changeSpec("d")
	res, err, got := reconcile(&conditions.Stall{Reason: "InvalidA", Message: "spec.a: d is not a letter of the widget's"}, func(*widget.Widget) error { return nil })
	expect("generation 3, stalled", got, kstatus.FailedStatus)
	if !errors.Is(err, crreconcile.TerminalError(nil)) || !res.IsZero() || got.Status.ObservedGeneration != 3 {
		t.Errorf("generation 3, stalled: result %+v, error %v, observedGeneration %d; want a terminal error alone, generation 3 observed",
			res, err, got.Status.ObservedGeneration)
	}
}
