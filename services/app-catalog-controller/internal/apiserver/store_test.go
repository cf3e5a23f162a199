package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// release is an app's HelmRelease as the store sees it: kind, namespace, name, resourceVersion,
// labels and values.
func release(kind, ns, name string, rv int, labels map[string]string, values string) *helmv2.HelmRelease {
	l := map[string]string{catalogv1.LabelAppKind: kind, catalogv1.LabelAppName: name}
	for k, v := range labels {
		l[k] = v
	}
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: fmt.Sprint(rv), Labels: l}}
	if values != "" {
		hr.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(values)}
	}
	return hr
}

// events is a watcher that records what it delivers, by type and name@resourceVersion.
func events(t *testing.T, st *store, kind, namespace, from string, keep func(*helmv2.HelmRelease) bool) (*watcher, error) {
	t.Helper()
	if keep == nil {
		keep = func(*helmv2.HelmRelease) bool { return true }
	}
	w := newWatcher(kind, namespace, keep, func(hr *helmv2.HelmRelease) (runtime.Object, error) { return hr.DeepCopy(), nil },
		func(rv uint64, initialEnd bool) watch.Event {
			return watch.Event{Type: watch.Bookmark, Object: &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: fmt.Sprint(rv)}}}
		})
	if err := st.watch(w, from, false); err != nil {
		return nil, err
	}
	go w.run()
	t.Cleanup(func() { w.Stop(); st.unwatch(w) })
	return w, nil
}

// next returns the watcher's next n events as "TYPE name@rv", or fails after a few seconds.
func next(t *testing.T, w *watcher, n int) []string {
	t.Helper()
	var out []string
	for range n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after %v", out)
			}
			hr := ev.Object.(*helmv2.HelmRelease)
			out = append(out, fmt.Sprintf("%s %s@%s", ev.Type, hr.Name, hr.ResourceVersion))
		case <-time.After(5 * time.Second):
			t.Fatalf("no event after %v", out)
		}
	}
	return out
}

// quiet fails if the watcher delivers anything within a moment.
func quiet(t *testing.T, w *watcher) {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("unexpected event %s %v", ev.Type, ev.Object)
	case <-time.After(100 * time.Millisecond):
	}
}

func equal(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

var limits = HistoryLimits{Changes: 1000, Bytes: 64 << 20}

// A watch's backlog (the current apps, or the history it resumes from) may be larger than the
// buffer for live changes: a client watching 10,000 apps gets all of them, then what follows.
func TestWatchBacklogLargerThanTheBuffer(t *testing.T) {
	st := newStore(HistoryLimits{Changes: 3 * watcherBuffer, Bytes: 1 << 40})
	n := 2 * watcherBuffer
	var initial []any
	for i := range n {
		initial = append(initial, release("Postgres", "ns", fmt.Sprint(i), i+1, nil, ""))
	}
	if err := st.Replace(initial, fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	for i := n; i < 2*n; i++ { // as many changes again, into the history
		_ = st.Add(release("Postgres", "ns", fmt.Sprint(i), i+1, nil, ""))
	}
	w, err := events(t, st, "Postgres", "", "0", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Add(release("Postgres", "ns", "late", 10*n, nil, "")) // a live change after the backlog
	if got := next(t, w, 2*n+1); got[2*n] != fmt.Sprintf("ADDED late@%d", 10*n) {
		t.Fatalf("last event %s", got[2*n])
	}
	resumed := newWatcher("Postgres", "", nil, nil, nil)
	if err := st.watch(resumed, fmt.Sprint(n), false); err != nil {
		t.Fatal(err)
	}
	if len(resumed.backlog) != n+1 || resumed.backlog[0].rv != uint64(n+1) {
		t.Fatalf("replay from %d: %d changes starting at %d, want %d from %d", n, len(resumed.backlog), resumed.backlog[0].rv, n+1, n+1)
	}
}

// An update with the resourceVersion already stored (a resync, or an event seen twice) is no
// change: no event, nothing in the history (issue 8: every app went to every watcher as
// MODIFIED with a resourceVersion that did not increase).
func TestUnchangedResourceVersionIsNoChange(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace([]any{release("Postgres", "ns", "a", 5, nil, "")}, "5")
	w, err := events(t, st, "Postgres", "", "5", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Update(release("Postgres", "ns", "a", 5, nil, ""))
	quiet(t, w)
	if h := st.histories["Postgres"]; h != nil && len(h.changes) > 0 {
		t.Fatalf("history holds %d changes", len(h.changes))
	}
}

// A relist starts a new history and ends every watch, as kube-apiserver's cacher does: what
// happened while the reflector was away is unknown, so no watch may pretend to have seen it.
func TestRelistEndsWatchesAndStartsANewHistory(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace([]any{release("Postgres", "ns", "a", 5, nil, "")}, "5")
	_ = st.Update(release("Postgres", "ns", "a", 6, nil, ""))
	w, err := events(t, st, "Postgres", "", "5", nil)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, next(t, w, 1), "MODIFIED a@6")
	_ = st.Replace([]any{release("Postgres", "ns", "b", 9, nil, "")}, "10")
	if _, ok := <-w.ResultChan(); ok {
		t.Fatal("the watch goes on after a relist")
	}
	if _, err := events(t, st, "Postgres", "", "6", nil); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch from before the relist: %v, want 410", err)
	}
	if _, _, err := st.list("Postgres", "", 6, func(*helmv2.HelmRelease) bool { return true }); !apierrors.IsResourceExpired(err) {
		t.Fatalf("list at before the relist: %v, want 410", err)
	}
}

// A watch of a kind in a namespace sees that kind in that namespace only.
func TestWatchSeesItsKindAndNamespaceOnly(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace(nil, "1")
	w, err := events(t, st, "Postgres", "tenant-a", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Add(release("Postgres", "tenant-b", "theirs", 2, nil, ""))
	_ = st.Add(release("Redis", "tenant-a", "other-kind", 3, nil, ""))
	_ = st.Add(release("Postgres", "tenant-a", "mine", 4, nil, ""))
	equal(t, next(t, w, 1), "ADDED mine@4")
	quiet(t, w)
	// resumed from the start, the same
	resumed, err := events(t, st, "Postgres", "tenant-a", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, next(t, resumed, 1), "ADDED mine@4")
	quiet(t, resumed)
}

// With a selector, an app entering it is ADDED and one leaving it DELETED, decided from the change
// itself: a watch resumed from any point gets exactly the events of one that was there all
// along, with no spurious DELETED and no MODIFIED where ADDED is due.
func TestResumedWatchWithASelector(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace(nil, "1")
	red := func(hr *helmv2.HelmRelease) bool { return hr.Labels["color"] == "red" }
	along, err := events(t, st, "Postgres", "", "1", red)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Add(release("Postgres", "ns", "a", 2, map[string]string{"color": "blue"}, ""))
	_ = st.Update(release("Postgres", "ns", "a", 3, map[string]string{"color": "red"}, ""))
	_ = st.Update(release("Postgres", "ns", "a", 4, map[string]string{"color": "red"}, `{"x":1}`))
	_ = st.Update(release("Postgres", "ns", "a", 5, map[string]string{"color": "blue"}, ""))
	_ = st.Update(release("Postgres", "ns", "a", 6, map[string]string{"color": "blue"}, `{"x":2}`))
	_ = st.Delete(release("Postgres", "ns", "a", 7, map[string]string{"color": "blue"}, ""))
	want := []string{"ADDED a@3", "MODIFIED a@4", "DELETED a@5"}
	equal(t, next(t, along, 3), want...)
	quiet(t, along)
	for from, want := range map[string][]string{"2": want, "3": want[1:], "4": want[2:], "5": nil} {
		w, err := events(t, st, "Postgres", "", from, red)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, next(t, w, len(want)), want...)
		quiet(t, w)
	}
}

// A list at an earlier resourceVersion is that moment's state, rebuilt from the history.
func TestListAtAnEarlierResourceVersion(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace([]any{release("Postgres", "ns", "a", 2, nil, "")}, "2")
	_ = st.Add(release("Postgres", "ns", "b", 3, nil, ""))
	_ = st.Update(release("Postgres", "ns", "a", 4, nil, `{"x":1}`))
	_ = st.Delete(release("Postgres", "ns", "b", 5, nil, ""))
	all := func(*helmv2.HelmRelease) bool { return true }
	for at, want := range map[uint64]string{2: "[a@2]", 3: "[a@2 b@3]", 4: "[a@4 b@3]", 5: "[a@4]", 0: "[a@4]"} {
		hrs, _, err := st.list("Postgres", "", at, all)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, hr := range hrs {
			got[hr.Name] = hr.Name + "@" + hr.ResourceVersion
		}
		var names []string
		for _, n := range []string{"a", "b"} {
			if got[n] != "" {
				names = append(names, got[n])
			}
		}
		if fmt.Sprint(names) != want {
			t.Errorf("at %d: %v, want %s", at, names, want)
		}
	}
}

// The history is bounded in bytes: over the budget, the kind with the largest history loses its
// oldest changes, so a busy kind with large apps cannot push a quiet kind's history out.
func TestHistoryBoundedInBytes(t *testing.T) {
	big := fmt.Sprintf(`{"blob":%q}`, make([]byte, 100<<10))
	st := newStore(HistoryLimits{Changes: 100000, Bytes: 4 << 20})
	_ = st.Replace(nil, "1")
	_ = st.Add(release("Redis", "ns", "quiet", 2, nil, ""))
	for i := range 200 {
		_ = st.Update(release("Postgres", "ns", "busy", 3+i, nil, big))
	}
	if st.bytes > 4<<20 {
		t.Fatalf("history holds %d bytes, budget %d", st.bytes, 4<<20)
	}
	if n := len(st.histories["Postgres"].changes); n >= 200 || n == 0 {
		t.Fatalf("busy kind kept %d of 200 changes", n)
	}
	if _, err := events(t, st, "Redis", "", "1", nil); err != nil {
		t.Fatalf("the quiet kind lost its history: %v", err)
	}
	if _, err := events(t, st, "Postgres", "", "3", nil); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch of the busy kind from its first change: %v, want 410", err)
	}
}

// A watch that allows bookmarks gets one at the store's resourceVersion, in order with its events.
func TestBookmarks(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace(nil, "1")
	w, err := events(t, st, "Postgres", "", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.bookmarks = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = st.Add(release("Postgres", "ns", "a", 2, nil, ""))
	st.UpdateResourceVersion("7") // the reflector saw a bookmark
	go st.bookmarks(ctx, 10*time.Millisecond)
	got := next(t, w, 2)
	equal(t, got, "ADDED a@2", "BOOKMARK @7")
}

// Shutting down ends every watch at once: the client resumes elsewhere instead of waiting.
func TestStopEndsWatches(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace(nil, "1")
	w, err := events(t, st, "Postgres", "", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	st.stop()
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("an event after stop")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch goes on after stop")
	}
	// A client whose watch just ended watches again at once, and the server still takes
	// requests while it shuts down: a watch the stopped store took would hold the shutdown up
	// (a minute) and see nothing meanwhile (CI: an informer did not converge after a restart).
	if w, err := events(t, st, "Postgres", "", "1", nil); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("a watch after stop: %v, %v; want 503", w, err)
	}
}

// A write answers once kube-apiserver has it; the next read waits until the store has applied
// it (read-your-writes), and a store that has already applied it answers at once.
func TestReadWaitsForTheWritesAnswered(t *testing.T) {
	st := newStore(limits)
	_ = st.Replace(nil, "5")
	st.saw(7) // a write answered with resourceVersion 7, not yet seen by the reflector
	read := make(chan *helmv2.HelmRelease)
	go func() {
		st.caughtUp(context.Background())
		read <- st.get("Postgres", "ns", "a")
	}()
	_ = st.Add(release("Postgres", "ns", "other", 6, nil, "")) // an earlier change does not do
	select {
	case <-read:
		t.Fatal("the read did not wait for the write it follows")
	case <-time.After(100 * time.Millisecond):
	}
	_ = st.Add(release("Postgres", "ns", "a", 7, nil, ""))
	select {
	case hr := <-read:
		if hr == nil || hr.ResourceVersion != "7" {
			t.Fatalf("read %v, want a@7", hr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read still waits after the store applied the write")
	}
	st.saw(3) // an older write changes nothing
	if got := st.seen.Load(); got != 7 {
		t.Fatalf("seen %d, want 7", got)
	}
}
