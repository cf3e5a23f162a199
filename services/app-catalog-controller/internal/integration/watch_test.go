package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// A watch started at a list's resourceVersion sees every later change exactly once, in order,
// while writers create, change and delete apps concurrently (and helm-controller writes their
// status): replaying the list plus the events gives exactly the state a final list returns.
// A second watch resumed from a resourceVersion in the middle sees exactly the first watch's
// events after it.
func TestWatchSeesEveryChangeExactlyOnce(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	ns := tenantNamespace(t, "watchers")
	pg := apps.Resource(postgresGVR).Namespace(ns)
	for i := range 5 {
		if _, err := pg.Create(ctx, appObject("Postgres", ns, fmt.Sprintf("w%d", i), "{}"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := pg.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{} // name → resourceVersion
	for _, it := range list.Items {
		state[it.GetName()] = it.GetResourceVersion()
	}
	w, err := pg.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// Writers: random creates, spec patches, label updates and deletes over 12 names.
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	var mu sync.Mutex
	// resourceVersions returned by successful writes. A write that changes nothing (a patch to
	// the value already set) returns the app as it is; when the app has not changed since the
	// list, that resourceVersion precedes the watch and no event carries it.
	written := map[string]bool{}
	listRV, _ := strconv.ParseUint(list.GetResourceVersion(), 10, 64)
	for writer := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(writer)))
			for range 40 {
				name := fmt.Sprintf("w%d", rng.IntN(12))
				var obj *unstructured.Unstructured
				var err error
				switch rng.IntN(4) {
				case 0:
					obj, err = pg.Create(ctx, appObject("Postgres", ns, name, "{}"), metav1.CreateOptions{})
				case 1:
					obj, err = pg.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, 1+rng.IntN(9)), metav1.PatchOptions{})
				case 2:
					obj, err = pg.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"n":"%d"}}}`, rng.IntN(1000)), metav1.PatchOptions{})
				case 3:
					err = pg.Delete(ctx, name, metav1.DeleteOptions{})
				}
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
					t.Errorf("%s: %v", name, err)
				}
				if err != nil || obj == nil {
					continue
				}
				if rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64); rv > listRV {
					mu.Lock()
					written[obj.GetResourceVersion()] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	// Let the dust settle (helm-controller finishing uninstalls), then take the final list.
	var final *unstructured.UnstructuredList
	eventually(t, 2*time.Minute, "deletions to finish", func() (bool, error) {
		final, err = pg.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, it := range final.Items {
			if it.GetDeletionTimestamp() != nil {
				return false, nil
			}
		}
		return true, nil
	})
	want := map[string]string{}
	for _, it := range final.Items {
		want[it.GetName()] = it.GetResourceVersion()
	}
	var events []watch.Event
	seen := map[string]bool{}
	allSeen := func() bool {
		for rv := range written {
			if !seen[rv] {
				return false
			}
		}
		return true
	}

	// Read events until list + events reproduce the final list and every write was seen; the
	// store's resourceVersion is global, so "up to the final list's" is no stop condition here.
	last := uint64(0)
	for fmt.Sprint(state) != fmt.Sprint(want) || !allSeen() {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed early after %d events", len(events))
			}
			obj := ev.Object.(*unstructured.Unstructured)
			rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
			if rv <= last {
				t.Fatalf("event %s %s at %d after %d: out of order or repeated", ev.Type, obj.GetName(), rv, last)
			}
			last = rv
			seen[obj.GetResourceVersion()] = true
			events = append(events, ev)
			switch ev.Type {
			case watch.Added, watch.Modified:
				state[obj.GetName()] = obj.GetResourceVersion()
			case watch.Deleted:
				delete(state, obj.GetName())
			}
		case <-time.After(30 * time.Second):
			for rv := range written {
				if !seen[rv] {
					t.Errorf("the write that produced resourceVersion %s was never seen", rv)
				}
			}
			t.Fatalf("no event for 30s:\nlist + events = %v\nfinal list    = %v", state, want)
		}
	}
	t.Logf("%d writes, %d events", len(written), len(events))

	// Resuming from the middle replays exactly the rest.
	mid := events[len(events)/2]
	resumed, err := pg.Watch(ctx, metav1.ListOptions{ResourceVersion: mid.Object.(*unstructured.Unstructured).GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	for _, want := range events[len(events)/2+1:] {
		select {
		case got := <-resumed.ResultChan():
			g, e := got.Object.(*unstructured.Unstructured), want.Object.(*unstructured.Unstructured)
			if got.Type != want.Type || g.GetName() != e.GetName() || g.GetResourceVersion() != e.GetResourceVersion() {
				t.Fatalf("resumed watch: got %s %s@%s, want %s %s@%s", got.Type, g.GetName(), g.GetResourceVersion(), want.Type, e.GetName(), e.GetResourceVersion())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("resumed watch stalled")
		}
	}
}

// A client that reads an app, has its update refused because someone else wrote in between
// (helm-controller's status writes do), and reads again, sees what it conflicted with, as a GET
// of a CRD (a quorum read) does, even while the apiserver's cache lags behind kube-apiserver:
// else each retry reads the same stale app and conflicts again until the cache catches up.
func TestReadAfterAConflictSeesWhatItConflictedWith(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	ns := tenantNamespace(t, "conflicts")
	pg := apps.Resource(postgresGVR).Namespace(ns)
	if _, err := pg.Create(ctx, appObject("Postgres", ns, "c", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", ns, "postgres/c", "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out) // helm-controller is done writing
	}

	appsLag.Store(int64(time.Second))
	defer appsLag.Store(0)
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-c"}}
	if err := kube.Patch(ctx, hr, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`))); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // kubectl edit, a controller
		attempts++
		u, err := pg.Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			return err
		}
		u.SetLabels(map[string]string{"put": "yes"})
		_, err = pg.Update(ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("read, change, update, again on a conflict (%d attempts): %v", attempts, err)
	}
	if attempts > 2 {
		t.Errorf("%d attempts; the read after the first conflict should have seen what it conflicted with", attempts)
	}
}
