package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime"
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
}

func newWriter(b *testing.B, ctx context.Context, apps dynamic.Interface, c crclient.Client) *writer {
	w := &writer{ctx: ctx, apps: apps, c: c, pids: controlPlane(b)}
	for i := range tenants {
		ns, name := appName(i)
		hr := &helmv2.HelmRelease{}
		check(b, c.Get(ctx, crclient.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-" + name}, hr))
		w.templates = append(w.templates, hr)
	}
	return w
}

// creates creates apps [from, to) with n concurrent writers and, after each block of them, the
// floor of as many (apps named f<app>). It returns each app create's latency and each floor
// create's, and the CPU time each process of the control plane spent on either.
func (w *writer) creates(b *testing.B, n, from, to int) ([]time.Duration, []floorCreate, cpuSplit) {
	var app []time.Duration
	var floor []floorCreate
	cpu := cpuSplit{app: cpuTimes{}, floor: cpuTimes{}}
	for start := from; start < to; start += block {
		end := min(to, start+block)
		cpu.app.during(b, w.pids, func() { app = append(app, createApps(b, w.ctx, w.apps, n, start, end)...) })
		cpu.floor.during(b, w.pids, func() {
			floor = append(floor, concurrently(b, n, start, end, w.floor)...)
		})
	}
	return app, floor, cpu
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

// cpuTimes is the CPU time used by each process of the control plane (the bench process runs the
// apps apiserver and the writers).
type cpuTimes map[string]time.Duration

// controlPlane finds the pids whose CPU time is reported: the control plane's processes (a
// process name in /proc is cut at 15 characters) and the bench's own.
func controlPlane(b *testing.B) map[string]int {
	pids := map[string]int{"the bench (apps apiserver, writers)": os.Getpid()}
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller"} {
		pid, err := testenv.ChildPID(name)
		check(b, err)
		pids[name] = pid
	}
	return pids
}

// during adds what f costs each of the processes pids to t.
func (t cpuTimes) during(b *testing.B, pids map[string]int, f func()) {
	now := func() cpuTimes {
		out := cpuTimes{}
		for name, pid := range pids {
			out[name] = must(testenv.ProcessStat(pid)).CPU
		}
		return out
	}
	before := now()
	f()
	for name, v := range now() {
		t[name] += v - before[name]
	}
}

type cpuSplit struct{ app, floor cpuTimes }

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
	m := memory{heap: float64(ms.HeapInuse)}
	body := direct.body(b, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, "flotilla_apps_watch_history_bytes %g", &v); err == nil {
			m.historyBytes = v
		}
		if _, err := fmt.Sscanf(line, "flotilla_apps_watch_history_changes %g", &v); err == nil {
			m.historyChanges = v
		}
	}
	return m
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
	cpu               cpuSplit        // what the writers' apps and floor cost each process
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
	for _, name := range slices.Sorted(maps.Keys(w.cpu.app)) {
		perApp := w.cpu.app[name] / time.Duration(len(w.create))
		perFloor := w.cpu.floor[name] / time.Duration(len(w.floor))
		fmt.Fprintf(&sb, "| CPU time of %s per create: the floor / an app | %s / %s | reported: %+.2f ms |\n", name, ms(perFloor), ms(perApp), float64((perApp-perFloor).Microseconds())/1000)
	}
	fmt.Fprintf(&sb, "| watch history: before the apps / at 10,000 apps / after 60 patches of one app with 60 KiB of values | %s (%.0f) / %s (%.0f) / %s (%.0f changes) | ≤ %s (`--watch-history-bytes`) |\n",
		mib(before.historyBytes), before.historyChanges, mib(at10k.historyBytes), at10k.historyChanges, mib(afterPatches.historyBytes), afterPatches.historyChanges, mib(float64(budget)))
	fmt.Fprintf(&sb, "| Go heap in use (bench process, apps apiserver included): before the apps / at 10,000 apps / after the 60 patches | %s / %s / %s | bounded: the history's budget plus one copy of each app |\n\n",
		mib(before.heap), mib(at10k.heap), mib(afterPatches.heap))
	return sb.String()
}
