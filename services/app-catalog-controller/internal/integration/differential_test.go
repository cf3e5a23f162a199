package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The apps API against its oracle: a CRD of the same schema (the twin), driven with the same
// randomized sequence of writes, observed by the same lists and watches. Everything a client
// observes must match, except these differences by design (docs/architecture.md, "What the
// apps API guarantees"):
//
//  1. An app's status is computed from its HelmRelease: helm-controller's status writes reach
//     watchers as MODIFIED events that change nothing else. Events are compared per object, with
//     such events (no change to labels or spec) left out.
//  2. An app is deleted by uninstalling its release: it shows a deletionTimestamp (MODIFIED, left
//     out as above) until helm-controller is done, then DELETED. So events are compared per
//     object, not in one global order (each side's order is checked on its own: resourceVersions
//     only increase).
//  3. resourceVersions are the HelmReleases'; their values differ from the twin's, their order
//     and their meaning do not.
//  4. A watch or continue token from a resourceVersion older than the apps apiserver's history
//     gets 410 Gone even where etcd has not compacted it yet (the twin may serve it from etcd).
//
// The fixed seed runs every time; FLOTILLA_DIFF_SEED picks another, and one more run with a seed
// from the clock follows unless -short.
func TestDifferentialAgainstCRDTwin(t *testing.T) {
	seeds := []uint64{1}
	if s, err := strconv.ParseUint(os.Getenv("FLOTILLA_DIFF_SEED"), 10, 64); err == nil {
		seeds = []uint64{s}
	} else if !testing.Short() {
		seeds = append(seeds, uint64(time.Now().UnixNano()))
	}
	nsA, nsB := tenantNamespace(t, "diffa"), tenantNamespace(t, "diffb")
	_, twinGVR := withTwin(t, "Memo", "memos", jotSchema)
	twinClient, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sides := []*side{
		{name: "app", gvr: schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "memos"}, apiVersion: "apps.flotilla.dev/v1alpha1", client: apps},
		{name: "twin", gvr: twinGVR, apiVersion: "twin.flotilla.dev/v1", client: twinClient},
	}
	for run, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			differentialRun(t, sides, fmt.Sprintf("r%d", run), nsA, nsB, seed, run == 0)
		})
	}
}

// side is one of the two APIs compared.
type side struct {
	name       string
	gvr        schema.GroupVersionResource
	apiVersion string
	client     dynamic.Interface
}

func (s *side) in(ns string) dynamic.ResourceInterface { return s.client.Resource(s.gvr).Namespace(ns) }

// post creates an object from a raw JSON body, as kubectl sends it, with a fieldValidation level.
func (s *side) post(ctx context.Context, ns, validation, body string) error {
	c, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return err
	}
	path := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s?fieldValidation=%s", env.Config.Host, s.gvr.Group, s.gvr.Version, ns, s.gvr.Resource, validation)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return nil
	}
	status := &metav1.Status{}
	if err := json.NewDecoder(resp.Body).Decode(status); err != nil {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return &apierrors.StatusError{ErrStatus: *status}
}

// as is the side's client for a tenant admin of ns.
func (s *side) as(t *testing.T, ns string) dynamic.ResourceInterface {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "diff-admin", Groups: []string{ns + "-admin"}}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.Resource(s.gvr).Namespace(ns)
}

// observed is what one watch delivered, by object, in the projection compared.
type observed struct {
	mu     sync.Mutex
	byKey  map[string][]string
	last   uint64
	errs   []string
	closed bool
}

func (o *observed) record(ev watch.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		o.errs = append(o.errs, fmt.Sprintf("%s: %T %v", ev.Type, ev.Object, ev.Object))
		return
	}
	if ev.Type == watch.Bookmark {
		return
	}
	rv, _ := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
	if rv <= o.last {
		o.errs = append(o.errs, fmt.Sprintf("%s %s at %d after %d", ev.Type, u.GetName(), rv, o.last))
	}
	o.last = rv
	key := u.GetNamespace() + "/" + u.GetName()
	p := string(ev.Type) + " " + project(u)
	if seq := o.byKey[key]; ev.Type == watch.Modified && len(seq) > 0 && strings.TrimPrefix(strings.TrimPrefix(seq[len(seq)-1], "ADDED "), "MODIFIED ") == project(u) {
		return // status or deletionTimestamp only: by design (1, 2)
	}
	o.byKey[key] = append(o.byKey[key], p)
}

// state is what the events add up to: the live objects' projections.
func (o *observed) state() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for key, seq := range o.byKey {
		last := seq[len(seq)-1]
		if !strings.HasPrefix(last, "DELETED") {
			out = append(out, key+" "+strings.SplitN(last, " ", 2)[1])
		}
	}
	slices.Sort(out)
	return out
}

// project is what is compared of an object: labels and spec (names are the keys).
func project(u *unstructured.Unstructured) string {
	spec, _ := json.Marshal(u.Object["spec"])
	labels, _ := json.Marshal(u.GetLabels())
	return string(labels) + " " + string(spec)
}

// watchInto records a watch's events; seed is the state the watch starts from, if any, so that
// the first change of an object is compared with it.
func watchInto(t *testing.T, ri dynamic.ResourceInterface, opts metav1.ListOptions, seed ...unstructured.Unstructured) (*observed, error) {
	w, err := ri.Watch(context.Background(), opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(w.Stop)
	o := &observed{byKey: map[string][]string{}}
	for i := range seed {
		o.byKey[seed[i].GetNamespace()+"/"+seed[i].GetName()] = []string{"ADDED " + project(&seed[i])}
	}
	go func() {
		for ev := range w.ResultChan() {
			o.record(ev)
		}
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
	}()
	return o, nil
}

func listed(l *unstructured.UnstructuredList) []string {
	var out []string
	for i := range l.Items {
		out = append(out, l.Items[i].GetNamespace()+"/"+l.Items[i].GetName()+" "+project(&l.Items[i]))
	}
	slices.Sort(out)
	return out
}

// result is how a request ended, as a client sees it: ok, or the error's HTTP code and reason.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	if s, ok := err.(apierrors.APIStatus); ok {
		return fmt.Sprintf("%d %s", s.Status().Code, s.Status().Reason)
	}
	return err.Error()
}

func differentialRun(t *testing.T, sides []*side, prefix, nsA, nsB string, seed uint64, restart bool) {
	ctx := context.Background()
	type watchers struct{ all, redInA, tenantA, platformLabel *observed }
	ws := make([]watchers, len(sides))
	startRV := make([]string, len(sides))
	for i, s := range sides {
		l, err := s.client.Resource(s.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		startRV[i] = l.GetResourceVersion()
		var inA, redInA []unstructured.Unstructured // what each watch starts from
		for _, it := range l.Items {
			if it.GetNamespace() == nsA {
				inA = append(inA, it)
				if it.GetLabels()["color"] == "red" {
					redInA = append(redInA, it)
				}
			}
		}
		all := metav1.ListOptions{ResourceVersion: startRV[i], AllowWatchBookmarks: true}
		red := metav1.ListOptions{ResourceVersion: startRV[i], LabelSelector: "color=red"}
		plat := metav1.ListOptions{ResourceVersion: startRV[i], LabelSelector: catalogv1.LabelAppKind + "=Memo"}
		var errs [4]error
		ws[i].all, errs[0] = watchInto(t, s.client.Resource(s.gvr), all, l.Items...)
		ws[i].redInA, errs[1] = watchInto(t, s.in(nsA), red, redInA...)
		ws[i].tenantA, errs[2] = watchInto(t, s.as(t, nsA), metav1.ListOptions{ResourceVersion: startRV[i]}, inA...)
		ws[i].platformLabel, errs[3] = watchInto(t, s.client.Resource(s.gvr), plat)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
	}

	// Informers of both kinds, as controllers run them: a client-go informer and a
	// controller-runtime cache.
	informers := make([]toolscache.SharedIndexInformer, len(sides))
	caches := make([]crcache.Cache, len(sides))
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	for i, s := range sides {
		informers[i] = dynamicinformer.NewDynamicSharedInformerFactory(s.client, 0).ForResource(s.gvr).Informer()
		go informers[i].RunWithContext(ctx)
		c, err := crcache.New(env.Config, crcache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(s.apiVersion)
		u.SetKind("Memo")
		if _, err := c.GetInformer(ctx, u); err != nil {
			t.Fatal(err)
		}
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), informers[i].HasSynced) {
			t.Fatalf("%s: informers did not sync", s.name)
		}
		caches[i] = c
	}

	// The same writes on both sides; each must end the same way.
	rng := rand.New(rand.NewPCG(seed, 0))
	var live []string // ns/name
	midRV := make([]string, len(sides))
	for step := range 60 {
		if step == 30 { // the middle: once the apps' deletions are done (2), both sides agree
			for i, s := range sides {
				midRV[i] = settled(t, s).GetResourceVersion()
			}
		}
		op := rng.IntN(12)
		if len(live) == 0 {
			op = 0
		}
		var target, ns, name string
		if op != 0 && op != 7 && op != 8 && op != 9 {
			target = live[rng.IntN(len(live))]
			ns, name, _ = strings.Cut(target, "/")
		} else {
			ns = []string{nsA, nsB}[rng.IntN(2)]
			name = fmt.Sprintf("%s-m%d", prefix, step)
		}
		color := []string{"red", "blue"}[rng.IntN(2)]
		replicas := 1 + rng.IntN(5)
		outcomes := map[string]string{}
		for _, s := range sides {
			ri := s.in(ns)
			var err error
			switch op {
			case 0: // create
				_, err = ri.Create(ctx, memo(s.apiVersion, "Memo", ns, name, color, replicas), metav1.CreateOptions{})
			case 1: // spec through a merge patch
				_, err = ri.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{})
			case 2: // a label through a JSON patch: across the color=red selector
				_, err = ri.Patch(ctx, name, types.JSONPatchType, fmt.Appendf(nil, `[{"op":"add","path":"/metadata/labels/color","value":%q}]`, color), metav1.PatchOptions{})
			case 3: // server-side apply by a second manager
				_, err = ri.Apply(ctx, name, memo(s.apiVersion, "Memo", ns, name, color, replicas), metav1.ApplyOptions{FieldManager: "diff", Force: true})
			case 4: // read, change, PUT, as clients do: again on a conflict (helm-controller's status
				// writes move an app's resourceVersion, as a controller's do a CRD's)
				err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					u, err := ri.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					u.SetLabels(map[string]string{"color": color, "put": "yes"})
					_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
					return err
				})
			case 5: // delete
				err = ri.Delete(ctx, name, metav1.DeleteOptions{})
			case 6: // an invalid write
				_, err = ri.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":"many"}}`), metav1.PatchOptions{})
			case 7: // a body of another kind
				_, err = ri.Create(ctx, memo(s.apiVersion, "Other", ns, name, color, replicas), metav1.CreateOptions{})
			case 8: // a key twice, strictly validated (kubectl's default)
				err = s.post(ctx, ns, "Strict", fmt.Sprintf(`{"apiVersion":%q,"kind":"Memo","metadata":{"name":%q},"spec":{"replicas":1,"replicas":%d}}`, s.apiVersion, name, replicas))
			case 9: // an unknown field, strictly validated
				err = s.post(ctx, ns, "Strict", fmt.Sprintf(`{"apiVersion":%q,"kind":"Memo","metadata":{"name":%q},"spec":{"replicas":%d,"bogus":1}}`, s.apiVersion, name, replicas))
			case 10: // PUT without a spec
				err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					u, err := ri.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					delete(u.Object, "spec")
					_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
					return err
				})
			case 11: // a merge patch setting spec to null
				_, err = ri.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":null}`), metav1.PatchOptions{})
			}
			outcomes[s.name] = result(err)
		}
		if outcomes["app"] != outcomes["twin"] {
			t.Errorf("step %d (op %d on %s/%s): app %s, twin %s", step, op, ns, name, outcomes["app"], outcomes["twin"])
		}
		switch {
		case (op == 0 || op == 8 || op == 9) && outcomes["twin"] == "ok":
			live = append(live, ns+"/"+name)
		case op == 5 && outcomes["twin"] == "ok":
			live = slices.DeleteFunc(live, func(s string) bool { return s == target })
		}
	}

	// Lists agree once the apps' deletions are done (2).
	var finals [][]string
	for _, s := range sides {
		finals = append(finals, listed(settled(t, s)))
	}
	same(t, "final list", finals[0], finals[1])
	for _, q := range []struct {
		what string
		ns   string
		opts metav1.ListOptions
	}{
		{"list in A", nsA, metav1.ListOptions{}},
		{"list color=red in A", nsA, metav1.ListOptions{LabelSelector: "color=red"}},
		{"list color!=red", "", metav1.ListOptions{LabelSelector: "color!=red"}},
		{"list with a platform label selector", "", metav1.ListOptions{LabelSelector: catalogv1.LabelAppKind + "=Memo"}},
		{"list by field metadata.name", "", metav1.ListOptions{FieldSelector: "metadata.name=" + prefix + "-m0"}},
		{"list at resourceVersion 0", "", metav1.ListOptions{ResourceVersion: "0"}},
	} {
		var got [][]string
		for _, s := range sides {
			l, err := s.in(q.ns).List(ctx, q.opts)
			if err != nil {
				t.Fatalf("%s %s: %v", s.name, q.what, err)
			}
			got = append(got, listed(l))
		}
		same(t, q.what, got[0], got[1])
	}
	var tenantLists [][]string
	for _, s := range sides {
		l, err := s.as(t, nsA).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: tenant list: %v", s.name, err)
		}
		tenantLists = append(tenantLists, listed(l))
	}
	same(t, "the tenant admin's list", tenantLists[0], tenantLists[1])

	// Paging: pages of 2 add up to the list, with the same sizes and counts.
	var pages [][]string
	for _, s := range sides {
		var all []string
		var shape []string
		opts := metav1.ListOptions{Limit: 2}
		for {
			l, err := s.client.Resource(s.gvr).List(ctx, opts)
			if err != nil {
				t.Fatalf("%s: paging: %v", s.name, err)
			}
			all = append(all, listed(l)...)
			shape = append(shape, fmt.Sprintf("%d items, more %v, remaining %v", len(l.Items), l.GetContinue() != "", ptrString(l.GetRemainingItemCount())))
			if l.GetContinue() == "" {
				break
			}
			opts.Continue = l.GetContinue()
		}
		slices.Sort(all)
		pages = append(pages, shape)
		same(t, s.name+": pages against the list", all, finals[len(pages)-1])
	}
	same(t, "pages", pages[0], pages[1])

	// The state at the middle of the run, exactly.
	var exact [][]string
	midRed := make([][]unstructured.Unstructured, len(sides)) // in A, for the resumed watch below
	for i, s := range sides {
		l, err := s.client.Resource(s.gvr).List(ctx, metav1.ListOptions{ResourceVersion: midRV[i], ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatalf("%s: exact list at %s: %v", s.name, midRV[i], err)
		}
		if l.GetResourceVersion() != midRV[i] {
			t.Errorf("%s: exact list at %s answered at %s", s.name, midRV[i], l.GetResourceVersion())
		}
		exact = append(exact, listed(l))
		for _, it := range l.Items {
			if it.GetNamespace() == nsA && it.GetLabels()["color"] == "red" {
				midRed[i] = append(midRed[i], it)
			}
		}
	}
	same(t, "list at the middle resourceVersion (Exact)", exact[0], exact[1])

	// Errors: the same codes for a resourceVersion from the future and one long gone.
	for _, q := range []struct {
		what  string
		watch bool
		opts  func(i int) metav1.ListOptions
	}{
		{"exact list in the future", false, func(i int) metav1.ListOptions {
			return metav1.ListOptions{ResourceVersion: "999999999", ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		}},
		{"watch from resourceVersion 1", true, func(i int) metav1.ListOptions { return metav1.ListOptions{ResourceVersion: "1"} }},
		{"resourceVersionMatch without a resourceVersion", false, func(i int) metav1.ListOptions {
			return metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
		}},
	} {
		got := map[string]string{}
		for i, s := range sides {
			var err error
			if q.watch {
				var w watch.Interface
				if w, err = s.client.Resource(s.gvr).Watch(ctx, q.opts(i)); err == nil {
					ev := <-w.ResultChan()
					if st, ok := ev.Object.(*metav1.Status); ok && ev.Type == watch.Error {
						err = &apierrors.StatusError{ErrStatus: *st}
					}
					w.Stop()
				}
			} else {
				_, err = s.client.Resource(s.gvr).List(ctx, q.opts(i))
			}
			got[s.name] = result(err)
		}
		if got["app"] != got["twin"] {
			t.Errorf("%s: app %s, twin %s", q.what, got["app"], got["twin"])
		}
	}

	// Watch-list: the current objects, then the bookmark that ends them.
	var initial [][]string
	for _, s := range sides {
		w, err := s.in(nsA).Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err != nil {
			t.Fatalf("%s: watch-list: %v", s.name, err)
		}
		var got []string
		for ev := range w.ResultChan() {
			u := ev.Object.(*unstructured.Unstructured)
			if ev.Type == watch.Bookmark {
				if u.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
					t.Errorf("%s: bookmark without %s", s.name, metav1.InitialEventsAnnotationKey)
				}
				break
			}
			got = append(got, string(ev.Type)+" "+u.GetNamespace()+"/"+u.GetName()+" "+project(u))
		}
		w.Stop()
		slices.Sort(got)
		initial = append(initial, got)
	}
	same(t, "watch-list initial events", initial[0], initial[1])

	// Every watch adds up to the final state, then the two sides' events are compared by object.
	finalIn := func(ns, sel string) []string {
		var out []string
		for _, f := range finals[1] {
			if (ns == "" || strings.HasPrefix(f, ns+"/")) && (sel == "" || strings.Contains(f, `"color":"red"`)) {
				out = append(out, f)
			}
		}
		return out
	}
	for i, s := range sides {
		for _, w := range []struct {
			what string
			o    *observed
			want []string
		}{
			{"watch of all", ws[i].all, finalIn("", "")},
			{"watch of color=red in A", ws[i].redInA, finalIn(nsA, "red")},
			{"the tenant admin's watch of A", ws[i].tenantA, finalIn(nsA, "")},
			{"watch with a platform label selector", ws[i].platformLabel, nil},
		} {
			eventually(t, 30*time.Second, s.name+" "+w.what+" to add up to the final list", func() (bool, error) {
				w.o.mu.Lock()
				closed := w.o.closed
				w.o.mu.Unlock()
				if closed {
					return false, fmt.Errorf("the watch ended")
				}
				return slices.Equal(w.o.state(), w.want), nil
			})
			w.o.mu.Lock()
			if len(w.o.errs) > 0 {
				t.Errorf("%s %s: %v", s.name, w.what, w.o.errs)
			}
			w.o.mu.Unlock()
		}
	}
	for _, pair := range []struct {
		what string
		a, b *observed
	}{
		{"watch of all", ws[0].all, ws[1].all},
		{"watch of color=red in A", ws[0].redInA, ws[1].redInA},
		{"the tenant admin's watch of A", ws[0].tenantA, ws[1].tenantA},
	} {
		sameEvents(t, pair.what, pair.a, pair.b)
	}

	// Resumed from the middle, with a selector: the same events again.
	var resumed []*observed
	for i, s := range sides {
		o, err := watchInto(t, s.in(nsA), metav1.ListOptions{ResourceVersion: midRV[i], LabelSelector: "color=red"}, midRed[i]...)
		if err != nil {
			t.Fatalf("%s: resumed watch: %v", s.name, err)
		}
		resumed = append(resumed, o)
	}
	time.Sleep(2 * time.Second) // a resumed watch's backlog (all in the past) comes at once
	sameEvents(t, "watch of color=red in A resumed from the middle", resumed[0], resumed[1])

	// The apps apiserver restarts: its watches end, its history starts again. Informers resume
	// or, with a resourceVersion older than the new history, relist; either way they converge on
	// the writes made before and after.
	if restart {
		if err := restartApps(); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the restarted apps apiserver to serve memos", func() (bool, error) {
			_, err := sides[0].client.Resource(sides[0].gvr).List(ctx, metav1.ListOptions{})
			return err == nil, err
		})
		for i := range 3 {
			for _, s := range sides {
				if _, err := s.in(nsA).Create(ctx, memo(s.apiVersion, "Memo", nsA, fmt.Sprintf("%s-after%d", prefix, i), "red", 1), metav1.CreateOptions{}); err != nil {
					t.Fatalf("%s: create after the restart: %v", s.name, err)
				}
			}
		}
		finals = nil
		for _, s := range sides {
			finals = append(finals, listed(settled(t, s)))
		}
		same(t, "list after the restart", finals[0], finals[1])
	}
	for i, s := range sides {
		eventually(t, time.Minute, s.name+" informers to converge on the final list", func() (bool, error) {
			var fromInformer []string
			for _, obj := range informers[i].GetStore().List() {
				u := obj.(*unstructured.Unstructured)
				fromInformer = append(fromInformer, u.GetNamespace()+"/"+u.GetName()+" "+project(u))
			}
			slices.Sort(fromInformer)
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion(s.apiVersion)
			l.SetKind("MemoList")
			if err := caches[i].List(ctx, l); err != nil {
				return false, err
			}
			return slices.Equal(fromInformer, finals[i]) && slices.Equal(listed(l), finals[i]), nil
		})
	}
}

// settled lists a side once no object is being deleted.
func settled(t *testing.T, s *side) *unstructured.UnstructuredList {
	t.Helper()
	var l *unstructured.UnstructuredList
	eventually(t, 2*time.Minute, s.name+" deletions to finish", func() (bool, error) {
		var err error
		if l, err = s.client.Resource(s.gvr).List(context.Background(), metav1.ListOptions{}); err != nil {
			return false, err
		}
		for _, it := range l.Items {
			if it.GetDeletionTimestamp() != nil {
				return false, nil
			}
		}
		return true, nil
	})
	return l
}

func ptrString(p *int64) string {
	if p == nil {
		return "nil"
	}
	return strconv.FormatInt(*p, 10)
}

func same(t *testing.T, what string, app, twin []string) {
	t.Helper()
	if !slices.Equal(app, twin) {
		t.Errorf("%s differs:\n app: %s\ntwin: %s", what, strings.Join(app, "\n      "), strings.Join(twin, "\n      "))
	}
}

func sameEvents(t *testing.T, what string, app, twin *observed) {
	t.Helper()
	app.mu.Lock()
	defer app.mu.Unlock()
	twin.mu.Lock()
	defer twin.mu.Unlock()
	keys := map[string]bool{}
	for k := range app.byKey {
		keys[k] = true
	}
	for k := range twin.byKey {
		keys[k] = true
	}
	for k := range keys {
		if !slices.Equal(app.byKey[k], twin.byKey[k]) {
			t.Errorf("%s, %s:\n app: %s\ntwin: %s", what, k, strings.Join(app.byKey[k], "\n      "), strings.Join(twin.byKey[k], "\n      "))
		}
	}
}

func memo(apiVersion, kind, ns, name, color string, replicas int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(replicas)}}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{"color": color})
	return u
}

// Deleting a tenant deletes its namespace and every app in it: a watch of the namespace sees each
// app DELETED, as a watch of the twin sees each of its objects when the namespace goes, and the
// apps API then lists nothing there.
func TestNamespaceDeletionAsForCRD(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "nsgone")
	_, twinGVR := withTwin(t, "Slip", "slips", jotSchema)
	sides := []*side{
		{name: "app", gvr: schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "slips"}, apiVersion: "apps.flotilla.dev/v1alpha1", client: apps},
		{name: "twin", gvr: twinGVR, apiVersion: "twin.flotilla.dev/v1", client: apps},
	}
	var watches []*observed
	for _, s := range sides {
		for i := range 3 {
			if _, err := s.in(ns).Create(ctx, memo(s.apiVersion, "Slip", ns, fmt.Sprintf("m%d", i), "red", 1), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		l, err := s.in(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o, err := watchInto(t, s.in(ns), metav1.ListOptions{ResourceVersion: l.GetResourceVersion()}, l.Items...)
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, o)
	}
	tn := &tenancyv1.Tenant{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.RootNamespace, Name: "nsgone"}, tn); err != nil {
		t.Fatal(err)
	}
	if err := kube.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	for i, s := range sides {
		eventually(t, 2*time.Minute, s.name+": every object in the namespace DELETED", func() (bool, error) {
			return len(watches[i].state()) == 0, nil
		})
		eventually(t, 2*time.Minute, s.name+": nothing listed in the namespace", func() (bool, error) {
			l, err := s.in(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, client.IgnoreNotFound(err)
		})
	}
	sameEvents(t, "watch of the deleted namespace", watches[0], watches[1])
}

// A watch that allows bookmarks gets them, as from kube-apiserver: at a resourceVersion not older
// than the watch's start, with nothing but the kind and the resourceVersion (within a minute: the
// apps apiserver sends one each --watch-bookmark-interval, kube-apiserver before a watch times out).
// kube-apiserver bookmarks only at a resourceVersion newer than the watch's start, and a quiet
// kind's cache advances only with etcd's progress notifications (every ten minutes by default), so
// each side gets one write once its watch is open.
func TestBookmarksAsForCRD(t *testing.T) {
	ctx := context.Background()
	withTwin(t, "Mark", "marks", jotSchema)
	ns := tenantNamespace(t, "marks")
	var wg sync.WaitGroup
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "marks"},
		{Group: "twin.flotilla.dev", Version: "v1", Resource: "marks"},
	} {
		l, err := apps.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		start, _ := strconv.ParseUint(l.GetResourceVersion(), 10, 64)
		w, err := apps.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: l.GetResourceVersion(), AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](75)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := apps.Resource(gvr).Namespace(ns).Create(ctx, memo(gvr.GroupVersion().String(), "Mark", ns, "m", "red", 1), metav1.CreateOptions{}); err != nil {
			w.Stop()
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type != watch.Bookmark {
					continue
				}
				u := ev.Object.(*unstructured.Unstructured)
				rv, _ := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
				if rv < start || u.GetName() != "" || u.Object["spec"] != nil {
					t.Errorf("%s: bookmark at %d (watch from %d): %v", gvr.Group, rv, start, u.Object)
				}
				return
			}
			t.Errorf("%s: no bookmark before the watch ended", gvr.Group)
		}()
	}
	wg.Wait()
}
