package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// block is how many apps are created between two blocks of as many floor creates (equal blocks:
// each starts and ends with the writers' queue filling and draining).
const block = 250

// floorCreate is what the goal measures an app create against, as one write: the aggregator hop
// carrying the app's body (a POST through the aggregator to a resource the apps apiserver does not
// serve, which it authenticates, authorizes and answers 404), then the same HelmRelease the app
// would become, created directly in kube-apiserver. It carries the app labels, so it costs the
// watches what an app's does: the apps apiserver's cache receives it, and kube-controller-manager
// sees it as an app through the aggregator.
type floorCreate struct{ total, hop time.Duration }

// writer creates apps and their floor.
type writer struct {
	ctx       context.Context
	apps      dynamic.Interface
	c         crclient.Client
	templates []*helmv2.HelmRelease // an app's HelmRelease in each tenant namespace, by tenant
	pids      map[string]int        // the processes whose CPU time is reported, by name
	admin     *endpoint             // kube-apiserver, whose /metrics says what it allocated
}

func newWriter(b *testing.B, ctx context.Context, apps dynamic.Interface, c crclient.Client, admin *endpoint) *writer {
	w := &writer{ctx: ctx, apps: apps, c: c, pids: controlPlane(b), admin: admin}
	for i := range tenants {
		ns, name := appName(i)
		hr := &helmv2.HelmRelease{}
		check(b, c.Get(ctx, crclient.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-" + name}, hr))
		w.templates = append(w.templates, hr)
	}
	return w
}

// creates creates apps [from, to) with n concurrent writers, in blocks, each paired with a block
// of as many floor creates (apps named f<app>). Which of the two goes first is drawn (with a fixed
// seed), so that the bench process's own garbage collections, every few blocks, do not fall on one
// kind for many pairs in a row (kube-apiserver's are kept out of the blocks: see cost.during). It
// returns each app create's latency and each floor create's, and what either cost each process of
// the control plane.
func (w *writer) creates(b *testing.B, n, from, to int) ([]time.Duration, []floorCreate, costSplit) {
	var app []time.Duration
	var floor []floorCreate
	cost := costSplit{app: newCost(), floor: newCost()}
	order := rand.New(rand.NewPCG(uint64(from), uint64(to)))
	for start := from; start < to; start += block {
		end := min(to, start+block)
		apps := func() { app = append(app, createApps(b, w.ctx, w.apps, n, start, end)...) }
		floors := func() { floor = append(floor, concurrently(b, n, start, end, w.floor)...) }
		if order.IntN(2) == 0 {
			cost.app.during(b, w, apps)
			cost.floor.during(b, w, floors)
		} else {
			cost.floor.during(b, w, floors)
			cost.app.during(b, w, apps)
		}
	}
	return app, floor, cost
}

// floor makes floor create i: the hop, then the HelmRelease.
func (w *writer) floor(i int) (floorCreate, error) {
	var f floorCreate
	var err error
	f.hop, err = timed(func() error {
		if err := createApp(w.ctx, w.apps, hopGVR, i); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the hop: want NotFound, got %v", err)
		}
		return nil
	})
	if err != nil {
		return f, err
	}
	t := w.templates[i%tenants] // shared by the writers: copied, as decoding the answer writes into hr
	_, name := appName(i)
	hr := &helmv2.HelmRelease{Spec: *t.Spec.DeepCopy()}
	hr.Namespace, hr.Name = t.Namespace, "pg-f"+name
	hr.Labels, hr.Annotations = maps.Clone(t.Labels), maps.Clone(t.Annotations)
	hr.Labels[catalogv1.LabelAppName] = "f" + name
	create, err := timed(func() error { return w.c.Create(w.ctx, hr) })
	f.total = f.hop + create
	return f, err
}

// hopGVR is a resource of the apps API's group version that no definition serves.
var hopGVR = schema.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: "benchhops"}

// createApps creates apps [from, to) with n concurrent writers and returns each create's latency.
func createApps(b *testing.B, ctx context.Context, apps dynamic.Interface, n, from, to int) []time.Duration {
	return concurrently(b, n, from, to, func(i int) (time.Duration, error) {
		return timed(func() error { return createApp(ctx, apps, gvr, i) })
	})
}

// createApp creates app i as a resource of r through the aggregator.
func createApp(ctx context.Context, apps dynamic.Interface, r schema.GroupVersionResource, i int) error {
	ns, name := appName(i)
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(1 + i%3)}}}
	u.SetAPIVersion("apps.flotilla.dev/v1alpha1")
	u.SetKind("Postgres")
	u.SetName(name)
	_, err := apps.Resource(r).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// controlPlane finds the pids whose CPU time is reported: the control plane's processes (a
// process name in /proc is cut at 15 characters) and the bench's own.
func controlPlane(b *testing.B) map[string]int {
	pids := map[string]int{benchProcess: os.Getpid()}
	for _, name := range []string{kubeAPIServer, "etcd", "kube-controller"} {
		pid, err := testenv.ChildPID(name)
		check(b, err)
		pids[name] = pid
	}
	return pids
}

// cost is what creates of one kind cost each process: CPU time, and the bytes allocated by the
// two Go runtimes that say so: kube-apiserver's (its /metrics) and the bench process's, in which
// the apps apiserver runs.
type cost struct {
	cpu   map[string]time.Duration
	alloc map[string]float64
	// collections counts the garbage collections inside the blocks, by process (see during).
	collections map[string]float64
}

func newCost() cost {
	return cost{cpu: map[string]time.Duration{}, alloc: map[string]float64{}, collections: map[string]float64{}}
}

type costSplit struct{ app, floor cost }

const (
	kubeAPIServer = "kube-apiserver"
	benchProcess  = "the bench (apps apiserver, writers)"
)

// during adds what f costs to c. The allocations are read outside the CPU window: reading
// kube-apiserver's /metrics costs it some. kube-apiserver collects its garbage first (its pprof
// heap handler's gc=1), so that no collection of its falls inside a block: it allocates the same
// for either kind, and each collection, about a second of its CPU, otherwise lands on whichever
// block is running (about one per pair of blocks). Left out of both kinds, its cost raises the
// app's ratio a little; it never lowers it. The bench process, which runs the apps apiserver and
// allocates more for an app, collects when it would.
func (c *cost) during(b *testing.B, w *writer, f func()) {
	w.admin.body(b, "/debug/pprof/heap?gc=1")
	gc0 := w.admin.metric(b, "go_gc_duration_seconds_count")
	cpu := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for name, pid := range w.pids {
			out[name] = must(testenv.ProcessStat(pid)).CPU
		}
		return out
	}
	a0 := map[string]float64{kubeAPIServer: w.admin.metric(b, "go_memstats_alloc_bytes_total")}
	a0[benchProcess] = allocated() // after reading /metrics, which allocates here
	own0 := collections()
	cpu0 := cpu()
	f()
	for name, v := range cpu() {
		c.cpu[name] += v - cpu0[name]
	}
	c.collections[benchProcess] += collections() - own0
	c.alloc[benchProcess] += allocated() - a0[benchProcess] // before reading /metrics, which allocates here
	c.alloc[kubeAPIServer] += w.admin.metric(b, "go_memstats_alloc_bytes_total") - a0[kubeAPIServer]
	c.collections[kubeAPIServer] += w.admin.metric(b, "go_gc_duration_seconds_count") - gc0
}

// allocated is how many bytes this process has allocated on its heap since it started.
func allocated() float64 { return runtimeMetric("/gc/heap/allocs:bytes") }

// collections is how many garbage collections this process has made since it started.
func collections() float64 { return runtimeMetric("/gc/cycles/total:gc-cycles") }

func runtimeMetric(name string) float64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// memory is what the apps apiserver holds: its watch cache's history (its own accounting, as
// /metrics shows it) and the bench process's Go heap after a collection (the apps apiserver runs
// in it; the bench's clients hold little).
type memory struct {
	historyBytes, historyChanges, heap float64
}

func measureMemory(b *testing.B, direct *endpoint) memory {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{heap: float64(ms.HeapInuse),
		historyBytes:   direct.metric(b, "flotilla_apps_watch_history_bytes"),
		historyChanges: direct.metric(b, "flotilla_apps_watch_history_changes")}
}

// largePatches changes one app 60 times with about 60 KiB of values each time: the case that
// grew the apps apiserver's memory without bound when its history was bounded by entries only.
func largePatches(b *testing.B, ctx context.Context, apps dynamic.Interface) {
	ns, name := appName(0)
	for i := range 60 {
		params := map[string]string{}
		for p := range 60 {
			params[fmt.Sprintf("p%02d", p)] = strings.Repeat(fmt.Sprint(i%10), 1000)
		}
		patch := map[string]any{"spec": map[string]any{"parameters": params}}
		raw := must(json.Marshal(patch))
		_, err := apps.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, raw, metav1.PatchOptions{})
		check(b, err)
	}
}

func mib(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }

// writes are the create latencies: with the bench's writers (the goal's figure) and one at a time.
type writes struct {
	create, oneCreate []time.Duration // apps, writers at a time and one at a time
	floor, oneFloor   []floorCreate   // their floor, the same
	cost              costSplit       // what the writers' apps and floor cost each process
	idleHop           time.Duration   // the aggregator hop of a GET, measured alone, p50
}

func (w writes) markdown(before, at10k, afterPatches memory, budget int64) string {
	p50 := func(d []time.Duration) time.Duration { return pct(d, .5) }
	parts := func(f []floorCreate) (total, hop, direct []time.Duration) {
		for _, c := range f {
			total, hop, direct = append(total, c.total), append(hop, c.hop), append(direct, c.total-c.hop)
		}
		return total, hop, direct
	}
	floor, hop, direct := parts(w.floor)
	oneFloor, _, oneDirect := parts(w.oneFloor)
	r := float64(p50(w.create)) / float64(p50(floor))
	status := "met"
	if r > 1.2 {
		status = "**not met**"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Writes and memory\n\n| figure | value | goal |\n|---|---|---|\n")
	fmt.Fprintf(&sb, "| floor: the aggregator hop carrying the app's body, then the same HelmRelease (app labels included) created directly in kube-apiserver, p50 / p99 (%d writers, in blocks alternating with the apps') | %s / %s | |\n", writers, ms(p50(floor)), ms(pct(floor, .99)))
	fmt.Fprintf(&sb, "| … its parts, p50: the hop / the direct create | %s / %s | |\n", ms(p50(hop)), ms(p50(direct)))
	fmt.Fprintf(&sb, "| create an app through the aggregator (HelmRelease written, read-your-writes), p50 / p99 | %s / %s | p50 ≤ 1.2× floor: **%.2f×** (%s) |\n",
		ms(p50(w.create)), ms(pct(w.create, .99)), r, status)
	fmt.Fprintf(&sb, "| the same against the direct create plus the hop of a GET measured alone (%s), the formula used before 2026-12-05 | | reported: %.2f× |\n",
		ms(w.idleHop), float64(p50(w.create))/float64(p50(direct)+w.idleHop))
	fmt.Fprintf(&sb, "| one writer: the floor (of which the direct create) / an app, p50 (p99) | %s (%s) / %s (%s) | reported: %.2f× |\n",
		ms(p50(oneFloor)), ms(p50(oneDirect)), ms(p50(w.oneCreate)), ms(pct(w.oneCreate, .99)), float64(p50(w.oneCreate))/float64(p50(oneFloor)))
	fmt.Fprintf(&sb, "| mean latency, %d writers (the writers' throughput): the floor / an app | %s / %s | reported: %.2f× |\n",
		writers, ms(mean(floor)), ms(mean(w.create)), float64(mean(w.create))/float64(mean(floor)))
	for _, name := range slices.Sorted(maps.Keys(w.cost.app.cpu)) {
		perApp, perFloor := w.cost.app.cpu[name]/time.Duration(len(w.create)), w.cost.floor.cpu[name]/time.Duration(len(w.floor))
		fmt.Fprintf(&sb, "| CPU time of %s per create: the floor / an app | %s / %s | reported: %+.2f ms |\n", name, ms(perFloor), ms(perApp), float64((perApp-perFloor).Microseconds())/1000)
	}
	for _, name := range slices.Sorted(maps.Keys(w.cost.app.alloc)) {
		perApp, perFloor := w.cost.app.alloc[name]/float64(len(w.create)), w.cost.floor.alloc[name]/float64(len(w.floor))
		fmt.Fprintf(&sb, "| bytes allocated by %s per create: the floor / an app | %.0f KiB / %.0f KiB | reported: %+.0f KiB |\n", name, perFloor/1024, perApp/1024, (perApp-perFloor)/1024)
	}
	fmt.Fprintf(&sb, "| garbage collections of kube-apiserver inside the blocks (it collects before each): the floor's / the apps' | %.0f / %.0f | |\n", w.cost.floor.collections[kubeAPIServer], w.cost.app.collections[kubeAPIServer])
	fmt.Fprintf(&sb, "| garbage collections of the bench process (apps apiserver) inside the blocks: the floor's / the apps' | %.0f / %.0f | |\n", w.cost.floor.collections[benchProcess], w.cost.app.collections[benchProcess])
	fmt.Fprintf(&sb, "| watch history: before the apps / at 10,000 apps / after 60 patches of one app with 60 KiB of values | %s (%.0f) / %s (%.0f) / %s (%.0f changes) | ≤ %s (`--watch-history-bytes`) |\n",
		mib(before.historyBytes), before.historyChanges, mib(at10k.historyBytes), at10k.historyChanges, mib(afterPatches.historyBytes), afterPatches.historyChanges, mib(float64(budget)))
	fmt.Fprintf(&sb, "| Go heap in use (bench process, apps apiserver included): before the apps / at 10,000 apps / after the 60 patches | %s / %s / %s | bounded: the history's budget plus one copy of each app |\n\n",
		mib(before.heap), mib(at10k.heap), mib(afterPatches.heap))
	return sb.String()
}
