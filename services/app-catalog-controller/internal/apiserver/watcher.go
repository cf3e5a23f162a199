package apiserver

import (
	"strconv"
	"sync"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watcherBuffer bounds the changes queued for one watch client; a client that falls this far
// behind is disconnected and resumes from the last resourceVersion it saw, as with
// kube-apiserver's watch cache.
const watcherBuffer = 4096

// watcher is one watch request: the store offers it the changes of its kind in its namespace, it
// filters and converts them and delivers watch.Events to the client.
type watcher struct {
	kind, namespace string
	// bookmarks: the client allows bookmarks.
	bookmarks bool
	// backlog is what the client gets first (the current apps or the history it missed), set by
	// the store before the watcher runs; in carries the changes after it.
	backlog []change
	in      chan change
	out     chan watch.Event
	done    chan struct{}
	once    sync.Once
	closed  bool // guarded by the store's lock

	// keep tells whether an app's HelmRelease matches the client's selectors.
	keep func(*helmv2.HelmRelease) bool
	// app converts an app's HelmRelease into the object sent (a copy the watcher owns).
	app func(*helmv2.HelmRelease) (runtime.Object, error)
	// bookmark makes a bookmark at a resourceVersion; initialEnd marks the end of initial events.
	bookmark func(rv uint64, initialEnd bool) watch.Event
}

func newWatcher(kind, namespace string, keep func(*helmv2.HelmRelease) bool, app func(*helmv2.HelmRelease) (runtime.Object, error),
	bookmark func(uint64, bool) watch.Event) *watcher {
	return &watcher{
		kind: kind, namespace: namespace, keep: keep, app: app, bookmark: bookmark,
		in: make(chan change, watcherBuffer), out: make(chan watch.Event), done: make(chan struct{}),
	}
}

// offer queues a change without blocking; false means the client is too slow.
func (w *watcher) offer(c change) bool {
	select {
	case w.in <- c:
		return true
	default:
		return false
	}
}

// closeInput is called by the store, under its lock, when the watcher leaves it.
func (w *watcher) closeInput() {
	if !w.closed {
		w.closed = true
		close(w.in)
	}
}

func (w *watcher) run() {
	defer close(w.out)
	for _, c := range w.backlog {
		if !w.deliver(c) {
			return
		}
	}
	w.backlog = nil
	for c := range w.in {
		if !w.deliver(c) {
			return
		}
	}
}

// deliver filters, converts and sends one change; false when the client has gone. With
// selectors, an app that starts matching them is ADDED and one that stops matching is DELETED
// (with its last matching content, at the change's resourceVersion), as kube-apiserver does;
// which one is decided from the change alone, so a watch resumed anywhere in the history gets
// the same events as one that was there all along.
func (w *watcher) deliver(c change) bool {
	if c.typ == watch.Bookmark {
		return w.send(w.bookmark(c.rv, c.initialEnd))
	}
	now := c.typ != watch.Deleted && w.keep(c.hr)
	before := c.prev != nil && w.keep(c.prev)
	switch {
	case c.typ == watch.Deleted && w.keep(c.hr):
		return w.sendApp(watch.Deleted, c.hr, c.rv)
	case now && before:
		return w.sendApp(watch.Modified, c.hr, c.rv)
	case now:
		return w.sendApp(watch.Added, c.hr, c.rv)
	case before && c.typ == watch.Modified:
		return w.sendApp(watch.Deleted, c.prev, c.rv)
	}
	return true
}

func (w *watcher) sendApp(typ watch.EventType, hr *helmv2.HelmRelease, rv uint64) bool {
	obj, err := w.app(hr)
	if err != nil {
		return w.send(watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus})
	}
	if rv != parseRV(hr.ResourceVersion) { // an app leaving the selectors: its last content, now
		if u, ok := obj.(interface{ SetResourceVersion(string) }); ok {
			u.SetResourceVersion(strconv.FormatUint(rv, 10))
		}
	}
	return w.send(watch.Event{Type: typ, Object: obj})
}

func (w *watcher) send(ev watch.Event) bool {
	select {
	case w.out <- ev:
		return true
	case <-w.done:
		return false
	}
}

// Stop implements watch.Interface.
func (w *watcher) Stop() { w.once.Do(func() { close(w.done) }) }

// ResultChan implements watch.Interface.
func (w *watcher) ResultChan() <-chan watch.Event { return w.out }
