package apiserver

import (
	"fmt"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// A watch's backlog (the current apps, or the history it resumes from) may be larger than the
// buffer for live changes: a client watching 10,000 apps gets all of them, then what follows.
func TestWatchBacklogLargerThanTheBuffer(t *testing.T) {
	st := newStore(3 * watcherBuffer)
	hr := func(i int) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: fmt.Sprintf("pg-%d", i), ResourceVersion: fmt.Sprint(i + 1),
			Labels: map[string]string{catalogv1.LabelAppKind: "Postgres", catalogv1.LabelAppName: fmt.Sprint(i)},
		}}
	}
	n := 2 * watcherBuffer
	for i := range n {
		st.apply(watch.Added, hr(i), true)
	}
	st.markSynced()
	for i := n; i < 2*n; i++ { // as many changes again, into the history
		st.apply(watch.Added, hr(i), false)
	}

	all := func(*helmv2.HelmRelease) (watch.Event, bool, error) { return watch.Event{}, true, nil }
	w := newWatcher(all, nil)
	if err := st.watch("Postgres", "", "0", false, w); err != nil {
		t.Fatal(err)
	}
	go w.run()
	st.apply(watch.Added, hr(10*n), false) // a live change after the backlog
	for i := range 2*n + 1 {
		if ev := <-w.ResultChan(); ev.Type != watch.Added {
			t.Fatalf("event %d: %s", i, ev.Type)
		}
	}
	w.Stop()
	st.unwatch(w)

	resumed := newWatcher(all, nil)
	if err := st.watch("Postgres", "", fmt.Sprint(n), false, resumed); err != nil {
		t.Fatal(err)
	}
	if len(resumed.backlog) != n+1 || resumed.backlog[0].rv != uint64(n+1) {
		t.Fatalf("replay from %d: %d changes starting at %d, want %d from %d", n, len(resumed.backlog), resumed.backlog[0].rv, n+1, n+1)
	}
}
