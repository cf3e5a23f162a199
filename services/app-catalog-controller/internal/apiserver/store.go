package apiserver

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// store is the apiserver's watch cache of HelmReleases that are apps. It is fed by one
// informer; reads, lists and watches are all served from it, so they agree on resourceVersions:
// a LIST at resourceVersion N followed by a WATCH from N misses nothing and repeats nothing.
type store struct {
	mu sync.RWMutex
	// apps by kind, then namespace/name of the app.
	apps map[string]map[appKey]*helmv2.HelmRelease
	// rv is the newest resourceVersion the store has applied.
	rv uint64
	// history of changes after the initial list, oldest first, at most historySize long; a watch
	// from a resourceVersion older than its start gets 410 Gone.
	history     []change
	historySize int
	// since is the resourceVersion the history covers changes after.
	since    uint64
	synced   bool
	watchers map[*watcher]struct{}
	// advanced is closed and replaced each time rv moves, for waitFor.
	advanced chan struct{}
	// converted memoizes each stored HelmRelease's app (*helmv2.HelmRelease → *converted):
	// stored objects are never modified, only replaced, so a conversion holds until then.
	converted sync.Map
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

type change struct {
	typ watch.EventType
	hr  *helmv2.HelmRelease // nil for a bookmark
	rv  uint64
}

func newStore(historySize int) *store {
	return &store{
		apps:        map[string]map[appKey]*helmv2.HelmRelease{},
		historySize: historySize,
		watchers:    map[*watcher]struct{}{},
		advanced:    make(chan struct{}),
	}
}

// handler feeds the store from a HelmRelease informer.
func (s *store) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if hr, ok := obj.(*helmv2.HelmRelease); ok {
				s.apply(watch.Added, hr, initial)
			}
		},
		UpdateFunc: func(_, obj any) {
			if hr, ok := obj.(*helmv2.HelmRelease); ok {
				s.apply(watch.Modified, hr, false)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if hr, ok := obj.(*helmv2.HelmRelease); ok {
				s.apply(watch.Deleted, hr, false)
			}
		},
	}
}

func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

func (s *store) apply(typ watch.EventType, hr *helmv2.HelmRelease, initial bool) {
	kind, name := hr.Labels[catalogv1.LabelAppKind], hr.Labels[catalogv1.LabelAppName]
	if kind == "" || name == "" {
		return
	}
	rv := parseRV(hr.ResourceVersion)
	key := appKey{catalog.AppNamespace(hr), name}
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := s.apps[kind]
	if byKey == nil {
		byKey = map[appKey]*helmv2.HelmRelease{}
		s.apps[kind] = byKey
	}
	if old, ok := byKey[key]; ok {
		s.converted.Delete(old)
	}
	if typ == watch.Deleted {
		delete(byKey, key)
	} else {
		byKey[key] = hr
	}
	if rv > s.rv {
		s.rv = rv
		close(s.advanced)
		s.advanced = make(chan struct{})
	}
	if initial || !s.synced {
		return
	}
	c := change{typ: typ, hr: hr, rv: rv}
	if len(s.history) == s.historySize {
		s.since = s.history[0].rv
		s.history = s.history[1:]
	}
	s.history = append(s.history, c)
	for w := range s.watchers {
		if !w.offer(c) {
			delete(s.watchers, w)
			w.closeInput()
		}
	}
}

// markSynced ends the initial list: changes from now on are history.
func (s *store) markSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = true
	s.since = s.rv
}

// get returns the HelmRelease of an app, or nil.
func (s *store) get(kind, namespace, name string) *helmv2.HelmRelease {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apps[kind][appKey{namespace, name}]
}

// list returns the HelmReleases of a kind's apps (in one namespace, or all when it is empty)
// and the store's resourceVersion.
func (s *store) list(kind, namespace string, keep func(*helmv2.HelmRelease) bool) ([]*helmv2.HelmRelease, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*helmv2.HelmRelease
	for key, hr := range s.apps[kind] {
		if (namespace == "" || key.namespace == namespace) && keep(hr) {
			out = append(out, hr)
		}
	}
	return out, s.rv
}

// watch registers a watcher for a kind. From resourceVersion 0 (or none), or when the client
// asks for initial events, it first gets the current apps as ADDED (then, when asked, the
// bookmark that ends them); from N it gets every change after N, or 410 Gone when N is older
// than the history. That backlog is a snapshot handed to the watcher whole; only the changes
// after it go through its bounded buffer.
func (s *store) watch(kind, namespace, from string, sendInitialEvents bool, w *watcher) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sendInitialEvents || from == "" || from == "0" {
		for key, hr := range s.apps[kind] {
			if namespace == "" || key.namespace == namespace {
				w.backlog = append(w.backlog, change{typ: watch.Added, hr: hr, rv: parseRV(hr.ResourceVersion)})
			}
		}
		if sendInitialEvents {
			w.backlog = append(w.backlog, change{typ: watch.Bookmark, rv: s.rv})
		}
	} else {
		rv, err := strconv.ParseUint(from, 10, 64)
		if err != nil {
			return apierrors.NewBadRequest("resourceVersion must be a number: " + from)
		}
		if rv < s.since {
			return apierrors.NewResourceExpired("too old resource version: " + from + " (the history starts after " + strconv.FormatUint(s.since, 10) + ")")
		}
		first, _ := slices.BinarySearchFunc(s.history, rv+1, func(c change, rv uint64) int { return cmp.Compare(c.rv, rv) })
		w.backlog = slices.Clone(s.history[first:])
	}
	s.watchers[w] = struct{}{}
	return nil
}

func (s *store) unwatch(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		w.closeInput()
	}
}

// waitFor blocks until the store has applied resourceVersion rv (or a newer one), so that a
// client reads its own writes; it gives up after timeout.
func (s *store) waitFor(ctx context.Context, rv string, timeout time.Duration) {
	want := parseRV(rv)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.RLock()
		done, advanced := s.rv >= want, s.advanced
		s.mu.RUnlock()
		if done {
			return
		}
		select {
		case <-advanced:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
