package apiserver

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	toolscache "k8s.io/client-go/tools/cache"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// store is the apiserver's watch cache of the HelmReleases that are apps, built the way
// kube-apiserver's cacher is: a client-go Reflector lists and watches HelmReleases into it (it is
// the reflector's store), and every GET, LIST and WATCH is served from it, so they agree on
// resourceVersions. A relist (the reflector's Replace) starts a new history and ends every watch,
// whose clients resume from their last resourceVersion or, when it is older than the new
// history, get 410 Gone and list again.
type store struct {
	mu sync.RWMutex
	// apps by kind, then namespace/name of the app.
	apps map[string]map[appKey]*helmv2.HelmRelease
	// rv is the resourceVersion the store is complete up to: the newest change it applied, or a
	// newer one the reflector reported (a bookmark).
	rv uint64
	// start is the resourceVersion of the last relist: each kind's history is complete after it
	// until changes are dropped from it.
	start     uint64
	histories map[string]*history
	limits    HistoryLimits
	bytes     int64 // of every kind's history
	changes   int   // in every kind's history
	watching  int
	watchers  map[string]map[*watcher]struct{}
	// stopped: the server is shutting down; watches are refused.
	stopped bool
	// advanced is closed and replaced each time rv moves, for waitFor.
	advanced chan struct{}
	// seen is the newest resourceVersion this server has answered a write with or read from
	// kube-apiserver. Reads wait until the store has reached it (caughtUp), so that a client reads
	// its own writes, and after a conflict what it conflicted with, without every write waiting
	// for its watch event, as kube-apiserver answers a write once etcd has it and makes
	// consistent reads from its watch cache wait for the cache.
	seen atomic.Uint64
	// ready is closed by the first relist.
	ready     chan struct{}
	readyOnce sync.Once
	// converted memoizes each stored HelmRelease's app (*helmv2.HelmRelease → *converted):
	// stored objects are never modified, only replaced, so a conversion holds until then.
	converted sync.Map
}

// HistoryLimits bound the changes a store keeps for watches that resume from a resourceVersion
// and for lists at an earlier one: the oldest changes go first. The size of a change is
// estimated from its HelmRelease (values, labels, annotations, managed fields, a fixed overhead).
type HistoryLimits struct {
	// Changes is the most changes kept per kind.
	Changes int
	// Bytes is the most kept over all kinds; over it, the kind with the largest history loses
	// its oldest change, so a busy kind cannot push a quiet one's history out.
	Bytes int64
}

// history is one kind's changes, oldest first.
type history struct {
	changes []change
	// since is the resourceVersion after which the history holds every change of its kind.
	since uint64
	bytes int64
}

// converted is an app as a stored HelmRelease shows it. It is shared by every reader, so it is
// never modified: readers that may modify it take a copy.
type converted struct {
	kind *catalog.Kind
	app  *unstructured.Unstructured
	// json is the app's JSON, encoded on first use; LISTs write it as is (see appList).
	json func() ([]byte, error)
}

func newConverted(k *catalog.Kind, app *unstructured.Unstructured) *converted {
	return &converted{kind: k, app: app, json: sync.OnceValues(func() ([]byte, error) { return json.Marshal(app.Object) })}
}

// app returns a copy of the app of a HelmRelease, which the caller owns.
func (s *store) app(k *catalog.Kind, hr *helmv2.HelmRelease) (*unstructured.Unstructured, error) {
	c, err := s.convert(k, hr)
	if err != nil {
		return nil, err
	}
	return c.app.DeepCopy(), nil
}

// convert returns the app of a HelmRelease, converted once per stored object and kind version (an
// object that is no longer stored, a deleted one or one replayed from the history, is converted
// without being remembered).
func (s *store) convert(k *catalog.Kind, hr *helmv2.HelmRelease) (*converted, error) {
	if c, ok := s.converted.Load(hr); ok && c.(*converted).kind == k {
		return c.(*converted), nil
	}
	app, err := toApp(k, hr)
	if err != nil {
		return nil, err
	}
	c := newConverted(k, app)
	s.mu.RLock()
	stored := s.apps[k.GVK.Kind][appKey{catalog.AppNamespace(hr), hr.Labels[catalogv1.LabelAppName]}] == hr
	if stored { // under the lock, so that apply cannot forget it in between
		s.converted.Store(hr, c)
	}
	s.mu.RUnlock()
	return c, nil
}

type appKey struct{ namespace, name string }

// change is one event of the history, or a bookmark on its way to a watcher.
type change struct {
	typ watch.EventType
	// hr is the HelmRelease after the change (for DELETED, its last state); nil for a bookmark.
	hr *helmv2.HelmRelease
	// prev is the HelmRelease before the change; nil for ADDED. A watch with selectors needs
	// both to tell an app entering or leaving them, as kube-apiserver's cacher does.
	prev *helmv2.HelmRelease
	rv   uint64
	size int64
	// initialEnd marks the bookmark that ends a watch's initial events.
	initialEnd bool
}

func newStore(limits HistoryLimits) *store {
	return &store{
		apps:      map[string]map[appKey]*helmv2.HelmRelease{},
		histories: map[string]*history{},
		limits:    limits,
		watchers:  map[string]map[*watcher]struct{}{},
		advanced:  make(chan struct{}),
		ready:     make(chan struct{}),
	}
}

func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// identify returns an app HelmRelease's kind and key; ok is false for anything else.
func identify(obj any) (hr *helmv2.HelmRelease, kind string, key appKey, ok bool) {
	if d, isTombstone := obj.(toolscache.DeletedFinalStateUnknown); isTombstone {
		obj = d.Obj
	}
	hr, ok = obj.(*helmv2.HelmRelease)
	if !ok {
		return nil, "", appKey{}, false
	}
	kind, name := hr.Labels[catalogv1.LabelAppKind], hr.Labels[catalogv1.LabelAppName]
	return hr, kind, appKey{catalog.AppNamespace(hr), name}, kind != "" && name != ""
}

// Add implements toolscache.ReflectorStore.
func (s *store) Add(obj any) error { s.apply(watch.Added, obj); return nil }

// Update implements toolscache.ReflectorStore.
func (s *store) Update(obj any) error { s.apply(watch.Modified, obj); return nil }

// Delete implements toolscache.ReflectorStore.
func (s *store) Delete(obj any) error { s.apply(watch.Deleted, obj); return nil }

// Resync implements toolscache.ReflectorStore: there is nothing to resync.
func (s *store) Resync() error { return nil }

// UpdateResourceVersion implements toolscache.ResourceVersionUpdater: the reflector reports the
// resourceVersion it has seen everything up to, bookmarks included.
func (s *store) UpdateResourceVersion(rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(parseRV(rv))
}

// Replace implements toolscache.ReflectorStore: a (re)list. The history starts again at the
// list's resourceVersion and every watch ends, as kube-apiserver's cacher does.
func (s *store) Replace(objs []any, rv string) error {
	apps := map[string]map[appKey]*helmv2.HelmRelease{}
	for _, obj := range objs {
		hr, kind, key, ok := identify(obj)
		if !ok {
			continue
		}
		if apps[kind] == nil {
			apps[kind] = map[appKey]*helmv2.HelmRelease{}
		}
		apps[kind][key] = hr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps = apps
	s.converted.Clear()
	s.rv = 0
	s.advance(parseRV(rv))
	s.start, s.histories, s.bytes, s.changes = s.rv, map[string]*history{}, 0, 0
	for kind, byWatcher := range s.watchers {
		for w := range byWatcher {
			s.drop(kind, w)
		}
	}
	s.measure()
	s.readyOnce.Do(func() { close(s.ready) })
	return nil
}

// stop ends every watch and refuses new ones, as the server shuts down: clients resume on another
// replica.
func (s *store) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for kind, byWatcher := range s.watchers {
		for w := range byWatcher {
			s.drop(kind, w)
		}
	}
}

// advance moves rv forward; the caller holds the lock.
func (s *store) advance(rv uint64) {
	if rv > s.rv {
		s.rv = rv
		close(s.advanced)
		s.advanced = make(chan struct{})
	}
}

func (s *store) apply(typ watch.EventType, obj any) {
	hr, kind, key, ok := identify(obj)
	if !ok {
		return
	}
	rv := parseRV(hr.ResourceVersion)
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := s.apps[kind]
	if byKey == nil {
		byKey = map[appKey]*helmv2.HelmRelease{}
		s.apps[kind] = byKey
	}
	prev := byKey[key]
	switch {
	case typ == watch.Deleted && prev == nil:
		return // never seen: nothing to delete
	case typ != watch.Deleted && prev != nil && prev.ResourceVersion == hr.ResourceVersion:
		return // no change: a resync, or an event seen twice
	case typ == watch.Added && prev != nil:
		typ = watch.Modified
	case typ == watch.Modified && prev == nil:
		typ = watch.Added
	}
	if prev != nil {
		s.converted.Delete(prev)
	}
	if typ == watch.Deleted {
		delete(byKey, key)
	} else {
		byKey[key] = hr
	}
	s.advance(rv)
	c := change{typ: typ, hr: hr, prev: prev, rv: rv, size: approxSize(hr)}
	s.record(kind, c)
	for w := range s.watchers[kind] {
		if w.namespace != "" && w.namespace != key.namespace {
			continue
		}
		if !w.offer(c) {
			s.drop(kind, w)
		}
	}
}

// record adds a change to its kind's history and drops the oldest changes over the limits.
func (s *store) record(kind string, c change) {
	h := s.history(kind)
	h.changes = append(h.changes, c)
	h.bytes += c.size
	s.bytes += c.size
	s.changes++
	defer s.measure()
	for len(h.changes) > s.limits.Changes {
		s.forget(h)
	}
	for s.bytes > s.limits.Bytes {
		largest := h
		for _, o := range s.histories {
			if o.bytes > largest.bytes {
				largest = o
			}
		}
		if len(largest.changes) == 0 {
			break
		}
		s.forget(largest)
	}
}

func (s *store) history(kind string) *history {
	h := s.histories[kind]
	if h == nil {
		h = &history{since: s.start}
		s.histories[kind] = h
	}
	return h
}

// forget drops a history's oldest change.
func (s *store) forget(h *history) {
	c := h.changes[0]
	h.changes[0] = change{} // let it be collected
	h.changes = h.changes[1:]
	h.since = c.rv
	h.bytes -= c.size
	s.bytes -= c.size
	s.changes--
}

// measure publishes the history's size and the open watches; the caller holds the lock.
func (s *store) measure() {
	historyBytes.Set(float64(s.bytes))
	historyChanges.Set(float64(s.changes))
	openWatches.Set(float64(s.watching))
}

// approxSize estimates what keeping a HelmRelease costs: the values dominate, the rest is
// metadata and a fixed overhead for the structure itself.
func approxSize(hr *helmv2.HelmRelease) int64 {
	n := 2048 + 256*len(hr.ManagedFields)
	if hr.Spec.Values != nil {
		n += len(hr.Spec.Values.Raw)
	}
	for k, v := range hr.Labels {
		n += len(k) + len(v)
	}
	for k, v := range hr.Annotations {
		n += len(k) + len(v)
	}
	return int64(n)
}

// get returns the HelmRelease of an app, or nil.
func (s *store) get(kind, namespace, name string) *helmv2.HelmRelease {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apps[kind][appKey{namespace, name}]
}

// list returns the HelmReleases of a kind's apps in a namespace (all when it is empty) that keep
// accepts, as they were at resourceVersion at (0: now), and the resourceVersion of the answer.
// A state older than the kind's history is 410 Gone.
func (s *store) list(kind, namespace string, at uint64, keep func(*helmv2.HelmRelease) bool) ([]*helmv2.HelmRelease, uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	state := s.apps[kind]
	rv := s.rv
	if at != 0 && at < s.rv {
		since := s.start
		h := s.histories[kind]
		if h != nil {
			since = h.since
		}
		if at < since {
			return nil, 0, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (the apps' history of %s starts after %d)", at, kind, since))
		}
		state = map[appKey]*helmv2.HelmRelease{}
		for key, hr := range s.apps[kind] {
			if namespace == "" || key.namespace == namespace {
				state[key] = hr
			}
		}
		if h != nil { // undo what came after at
			for i := len(h.changes) - 1; i >= 0 && h.changes[i].rv > at; i-- {
				c := h.changes[i]
				_, _, key, _ := identify(c.hr)
				if c.prev == nil {
					delete(state, key)
				} else {
					state[key] = c.prev
				}
			}
		}
		rv = at
	}
	var out []*helmv2.HelmRelease
	for key, hr := range state {
		if (namespace == "" || key.namespace == namespace) && keep(hr) {
			out = append(out, hr)
		}
	}
	return out, rv, nil
}

// watch registers a watcher. From resourceVersion 0 (or none), or when the client asks for
// initial events, it first gets the current apps as ADDED (then, when asked, the bookmark that
// ends them); from N it gets every change after N, or 410 Gone when N is older than the kind's
// history. That backlog is a snapshot handed to the watcher whole; only the changes after it go
// through its bounded buffer.
func (s *store) watch(w *watcher, from string, sendInitialEvents bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		// The server still takes requests while it shuts down, and a client whose watch stop
		// ended watches again at once: it must go elsewhere, not wait here for the shutdown.
		return apierrors.NewServiceUnavailable("the apps apiserver is shutting down")
	}
	if sendInitialEvents || from == "" || from == "0" {
		for key, hr := range s.apps[w.kind] {
			if w.namespace == "" || key.namespace == w.namespace {
				w.backlog = append(w.backlog, change{typ: watch.Added, hr: hr, rv: parseRV(hr.ResourceVersion)})
			}
		}
		if sendInitialEvents {
			w.backlog = append(w.backlog, change{typ: watch.Bookmark, rv: s.rv, initialEnd: true})
		}
	} else {
		rv, err := strconv.ParseUint(from, 10, 64)
		if err != nil {
			return apierrors.NewBadRequest("resourceVersion must be a number: " + from)
		}
		h := s.history(w.kind)
		if rv < h.since {
			return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, h.since))
		}
		first, _ := slices.BinarySearchFunc(h.changes, rv+1, func(c change, rv uint64) int { return cmp.Compare(c.rv, rv) })
		for _, c := range h.changes[first:] {
			if _, _, key, _ := identify(c.hr); w.namespace == "" || key.namespace == w.namespace {
				w.backlog = append(w.backlog, c)
			}
		}
	}
	if s.watchers[w.kind] == nil {
		s.watchers[w.kind] = map[*watcher]struct{}{}
	}
	s.watchers[w.kind][w] = struct{}{}
	s.watching++
	s.measure()
	return nil
}

func (s *store) unwatch(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(w.kind, w)
}

// drop ends a watcher's input; the caller holds the lock.
func (s *store) drop(kind string, w *watcher) {
	if _, ok := s.watchers[kind][w]; ok {
		delete(s.watchers[kind], w)
		w.closeInput()
		s.watching--
		s.measure()
	}
}

// bookmarks sends every watcher that allows them a bookmark at the store's resourceVersion each
// interval, until ctx ends: a quiet watch then resumes from a recent resourceVersion instead of
// one the history may no longer hold.
func (s *store) bookmarks(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		for kind, byWatcher := range s.watchers {
			for w := range byWatcher {
				if w.bookmarks && !w.offer(change{typ: watch.Bookmark, rv: s.rv}) {
					s.drop(kind, w)
				}
			}
		}
		s.mu.Unlock()
	}
}

// waitFor blocks until the store has applied resourceVersion rv (or a newer one), for at most
// timeout, and reports whether it has.
func (s *store) waitFor(ctx context.Context, rv uint64, timeout time.Duration) bool {
	s.mu.RLock()
	done := s.rv >= rv
	s.mu.RUnlock()
	if done { // the common case, for every read (caughtUp): no timer
		return true
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.RLock()
		done, advanced := s.rv >= rv, s.advanced
		s.mu.RUnlock()
		if done {
			return true
		}
		select {
		case <-advanced:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// saw records that kube-apiserver had resourceVersion rv: a write through this server answered
// with it, or a read of a HelmRelease returned it.
func (s *store) saw(rv uint64) {
	for {
		w := s.seen.Load()
		if rv <= w || s.seen.CompareAndSwap(w, rv) {
			return
		}
	}
}

// caughtUp waits, for at most readYourWrites, until the store has reached every resourceVersion
// this server has seen (store.seen): what a read does first. Once the store is there, it costs a
// lock and a comparison.
func (s *store) caughtUp(ctx context.Context) {
	if rv := s.seen.Load(); rv > 0 {
		s.waitFor(ctx, rv, readYourWrites)
	}
}

// freshness is how long a read at a resourceVersion newer than the store's waits for it, as
// kube-apiserver's cacher does, before it answers "too large resource version".
const freshness = 3 * time.Second

// waitFresh waits until the store is at least at rv, or answers 504 with a Retry-After.
func (s *store) waitFresh(ctx context.Context, rv uint64) error {
	if s.waitFor(ctx, rv, freshness) {
		return nil
	}
	s.mu.RLock()
	current := s.rv
	s.mu.RUnlock()
	return storage.NewTooLargeResourceVersionError(rv, current, 1)
}
