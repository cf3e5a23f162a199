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
	k8s := env.Client
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
	if _, failing := reconcile(ready, metav1.ConditionFalse); conditions.IsTrue(failing, "Ready") {
		t.Errorf("Built=False: still Ready")
	}

	// One Event for the first Ready, one for the flip, none for the rest. The recorder sends them
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
	if want := map[string]int{"w Normal Succeeded": 1, "w Warning Test": 1}; !maps.Equal(got, want) {
		t.Errorf("events: %v, want %v", got, want)
	}
}
