package apiserver

import (
	"sync"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// watcherBuffer bounds the changes queued for one watch client; a client that falls this far
// behind is disconnected and resumes from the last resourceVersion it saw, as with
// kube-apiserver's watch cache.
const watcherBuffer = 4096

// watcher is one watch request: the store offers it changes, it converts and filters them and
// delivers watch.Events to the client.
type watcher struct {
	// backlog is what the client gets first (the current apps or the history it missed), set by
	// the store before the watcher runs; in carries the changes after it.
	backlog []change
	in      chan change
	out     chan watch.Event
	done    chan struct{}
	once    sync.Once
	closed  bool // guarded by the store's lock

	convert func(*helmv2.HelmRelease) (watch.Event, bool, error)
	// bookmark makes the bookmark event ending the initial events at a resourceVersion.
	bookmark func(rv uint64) watch.Event
	// hidden holds the apps this client knows not to match its selectors: a change that makes
	// an app stop matching is sent as DELETED, one that makes it match as ADDED, as
	// kube-apiserver does. Without selectors every app matches and event types pass through.
	hidden map[appKey]bool
}

func newWatcher(convert func(*helmv2.HelmRelease) (watch.Event, bool, error), bookmark func(uint64) watch.Event) *watcher {
	return &watcher{
		in: make(chan change, watcherBuffer), out: make(chan watch.Event),
		done: make(chan struct{}), convert: convert, bookmark: bookmark, hidden: map[appKey]bool{},
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

// deliver converts, filters and sends one change; false when the client has gone.
func (w *watcher) deliver(c change) bool {
	if c.typ == watch.Bookmark {
		return w.send(w.bookmark(c.rv))
	}
	ev, matches, err := w.convert(c.hr)
	if err != nil {
		return w.send(watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus})
	}
	key := appKey{c.hr.Namespace, c.hr.Name}
	hidden := w.hidden[key]
	switch {
	case c.typ == watch.Deleted:
		delete(w.hidden, key)
		if hidden {
			return true
		}
		ev.Type = watch.Deleted
	case !matches:
		w.hidden[key] = true
		if hidden || c.typ == watch.Added {
			return true
		}
		ev.Type = watch.Deleted
	case hidden || c.typ == watch.Added:
		delete(w.hidden, key)
		ev.Type = watch.Added
	default:
		ev.Type = watch.Modified
	}
	return w.send(ev)
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
