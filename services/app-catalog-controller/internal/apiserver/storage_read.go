package apiserver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// The read half of an app kind's storage: GET, LIST and WATCH, answered from the store (the
// apiserver's watch cache of HelmReleases), never with a request to kube-apiserver. Why not
// k8s.io/apiserver's cacher: docs/architecture.md, "The apps apiserver's storage".

// ConvertToTable implements rest.TableConvertor. A table that includes whole objects gets copies
// of a list's items: the handler sets their apiVersion and kind in place.
func (s *appStorage) ConvertToTable(ctx context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	if l, ok := obj.(*appList); ok {
		obj = l.UnstructuredList
		if o, ok := opts.(*metav1.TableOptions); ok && o.IncludeObject == metav1.IncludeObject {
			obj = l.DeepCopy()
		}
	}
	return s.kind.Table.ConvertToTable(ctx, obj, opts)
}

// Get implements rest.Getter.
func (s *appStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	s.store.caughtUp(ctx)
	hr := s.store.get(s.kind.GVK.Kind, genericapirequest.NamespaceValue(ctx), name)
	if hr == nil {
		return nil, apierrors.NewNotFound(s.gr(), name)
	}
	return s.store.app(s.kind, hr)
}

// List implements rest.Lister, with kube-apiserver's resourceVersion semantics:
//   - none or 0: the current apps;
//   - N (NotOlderThan): the current apps once the store has seen N (504 after a few seconds);
//   - N, Exact: the apps as they were at N, from the history (410 when it no longer reaches N);
//   - limit and continue: pages of one snapshot in namespace/name order, the continue token
//     holding its resourceVersion (with resourceVersion 0 the whole list, as from kube-apiserver's
//     watch cache).
//
// Label selectors apply to the app's labels; field selectors to metadata.name and
// metadata.namespace.
func (s *appStorage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	opts, keep, err := s.reading(ctx, opts)
	if err != nil {
		return nil, err
	}
	var at uint64
	from, limit := "", opts.Limit
	switch {
	case opts.Continue != "":
		key, rv, err := storage.DecodeContinue(opts.Continue, "/")
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
		}
		at, from = uint64(rv), key
	case opts.ResourceVersion == "0":
		limit = 0
	case opts.ResourceVersion != "":
		rv, err := strconv.ParseUint(opts.ResourceVersion, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest("resourceVersion must be a number: " + opts.ResourceVersion)
		}
		if err := s.store.waitFresh(ctx, rv); err != nil {
			return nil, err
		}
		if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
			at = rv
		}
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	hrs, rv, err := s.store.list(s.kind.GVK.Kind, namespace, at, keep)
	if apierrors.IsResourceExpired(err) && from != "" {
		return nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(hrs, byKey)
	if from != "" {
		first, _ := slices.BinarySearchFunc(hrs, from, func(hr *helmv2.HelmRelease, from string) int { return strings.Compare(listKey(hr), from) })
		hrs = hrs[first:]
	}
	list := s.NewList().(*unstructured.UnstructuredList)
	list.SetResourceVersion(strconv.FormatUint(rv, 10))
	if limit > 0 && int64(len(hrs)) > limit {
		remaining := int64(len(hrs)) - limit
		hrs = hrs[:limit]
		token, err := storage.EncodeContinue(listKey(hrs[len(hrs)-1])+"\x00", "/", int64(rv))
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		list.SetContinue(token)
		if (opts.LabelSelector == nil || opts.LabelSelector.Empty()) && (opts.FieldSelector == nil || opts.FieldSelector.Empty()) {
			list.SetRemainingItemCount(&remaining)
		}
	}
	if len(hrs) == 0 {
		return list, nil
	}
	out := &appList{UnstructuredList: list, items: make([]*converted, 0, len(hrs))}
	list.Items = make([]unstructured.Unstructured, 0, len(hrs))
	for _, hr := range hrs {
		c, err := s.store.convert(s.kind, hr)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		list.Items = append(list.Items, *c.app) // shares the stored app: see appList
		out.items = append(out.items, c)
	}
	return out, nil
}

// byKey orders apps as their listKeys compare, without building the keys (a LIST sorts every app).
func byKey(a, b *helmv2.HelmRelease) int {
	na, nb := catalog.AppNamespace(a), catalog.AppNamespace(b)
	if na == nb {
		return strings.Compare(a.Labels[catalogv1.LabelAppName], b.Labels[catalogv1.LabelAppName])
	}
	// Compare na+"/" with nb+"/": when one is a prefix of the other, the shorter goes on with '/'.
	n := min(len(na), len(nb))
	if c := strings.Compare(na[:n], nb[:n]); c != 0 {
		return c
	}
	if len(na) < len(nb) {
		return cmp.Compare('/', nb[n])
	}
	return cmp.Compare(na[n], '/')
}

// listKey orders a list and places its pages: /namespace/name of the app.
func listKey(hr *helmv2.HelmRelease) string {
	return "/" + catalog.AppNamespace(hr) + "/" + hr.Labels[catalogv1.LabelAppName]
}

// reading begins a list or a watch: its options (none: the defaults), its selectors as a filter,
// once the store shows what this server has written and read (read-your-writes).
func (s *appStorage) reading(ctx context.Context, opts *metainternalversion.ListOptions) (*metainternalversion.ListOptions, func(*helmv2.HelmRelease) bool, error) {
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	keep, err := s.filter(opts)
	if err != nil {
		return nil, nil, err
	}
	s.store.caughtUp(ctx)
	return opts, keep, nil
}

// filter is a list's or watch's selectors as a test on an app's HelmRelease. Labels are the
// app's: the platform's apps.flotilla.dev/ keys, which an app never shows, match nothing.
func (s *appStorage) filter(opts *metainternalversion.ListOptions) (func(*helmv2.HelmRelease) bool, error) {
	lsel, fsel := labels.Everything(), fields.Everything()
	if opts != nil && opts.LabelSelector != nil {
		lsel = opts.LabelSelector
	}
	if opts != nil && opts.FieldSelector != nil {
		fsel = opts.FieldSelector
		for _, r := range fsel.Requirements() {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("field selector %q: only metadata.name and metadata.namespace are supported", r.Field))
			}
		}
	}
	return func(hr *helmv2.HelmRelease) bool {
		return (lsel.Empty() || lsel.Matches(labels.Set(userKeys(hr.Labels)))) &&
			(fsel.Empty() || fsel.Matches(fields.Set{"metadata.name": hr.Labels[catalogv1.LabelAppName], "metadata.namespace": catalog.AppNamespace(hr)}))
	}, nil
}

// Watch implements rest.Watcher, from the store (see store.watch for resourceVersion rules). A
// watch from a resourceVersion the store has not seen yet waits for it, as a list does.
func (s *appStorage) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	opts, keep, err := s.reading(ctx, opts)
	if err != nil {
		return nil, err
	}
	if rv := parseRV(opts.ResourceVersion); rv > 0 {
		if err := s.store.waitFresh(ctx, rv); err != nil {
			return nil, err
		}
	}
	w := newWatcher(s.kind.GVK.Kind, genericapirequest.NamespaceValue(ctx), keep,
		func(hr *helmv2.HelmRelease) (runtime.Object, error) { return s.store.app(s.kind, hr) },
		func(rv uint64, initialEnd bool) watch.Event {
			u := s.New().(*unstructured.Unstructured)
			u.SetResourceVersion(strconv.FormatUint(rv, 10))
			if initialEnd {
				u.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			}
			return watch.Event{Type: watch.Bookmark, Object: u}
		})
	w.bookmarks = opts.AllowWatchBookmarks
	if err := s.store.watch(w, opts.ResourceVersion, opts.SendInitialEvents != nil && *opts.SendInitialEvents); err != nil {
		return nil, err
	}
	go w.run()
	go func() {
		<-w.done
		s.store.unwatch(w)
	}()
	return w, nil
}
