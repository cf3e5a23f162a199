package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// directCreates is the floor of an app create: the HelmRelease an app becomes, created directly in
// kube-apiserver by as many concurrent writers as the apps were (without the app labels, so the
// apps apiserver does not serve them), named prefix-00000 on.
func directCreates(b *testing.B, ctx context.Context, c crclient.Client, writers int, prefix string, n int) []time.Duration {
	ns, name := appName(0)
	template := &helmv2.HelmRelease{}
	check(b, c.Get(ctx, crclient.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(ns), Name: "pg-" + name}, template))
	return concurrently(b, writers, 0, n, func(i int) error {
		hr := &helmv2.HelmRelease{Spec: template.Spec}
		hr.Namespace, hr.Name = template.Namespace, fmt.Sprintf("%s-%05d", prefix, i)
		hr.Labels = map[string]string{"bench": "floor"}
		return c.Create(ctx, hr)
	})
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
	create, floor       []time.Duration // writers at a time
	oneCreate, oneFloor []time.Duration // one at a time
	hop                 time.Duration   // the aggregator hop alone, p50
}

func (w writes) markdown(before, at10k, afterPatches memory, budget int64) string {
	create, floor, hop := w.create, w.floor, w.hop
	p50 := func(d []time.Duration) time.Duration { return pct(d, .5) }
	goal := p50(floor) + hop
	r := float64(p50(create)) / float64(goal)
	status := "met"
	if r > 1.2 {
		status = "**not met**"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Writes and memory\n\n| figure | value | goal |\n|---|---|---|\n")
	fmt.Fprintf(&sb, "| floor: the same HelmRelease created directly in kube-apiserver, p50 / p99 (%d writers) | %s / %s | |\n", writers, ms(p50(floor)), ms(pct(floor, .99)))
	fmt.Fprintf(&sb, "| create an app through the aggregator (HelmRelease written, read-your-writes), p50 / p99 | %s / %s | p50 ≤ 1.2× (floor + hop %s = %s): **%.2f×** (%s) |\n",
		ms(p50(create)), ms(pct(create, .99)), ms(hop), ms(goal), r, status)
	fmt.Fprintf(&sb, "| one writer: the HelmRelease created directly / an app created through the aggregator, p50 (p99) | %s (%s) / %s (%s) | reported: %.2f× (floor + hop) |\n",
		ms(p50(w.oneFloor)), ms(pct(w.oneFloor, .99)), ms(p50(w.oneCreate)), ms(pct(w.oneCreate, .99)), float64(p50(w.oneCreate))/float64(p50(w.oneFloor)+hop))
	fmt.Fprintf(&sb, "| watch history: before the apps / at 10,000 apps / after 60 patches of one app with 60 KiB of values | %s (%.0f) / %s (%.0f) / %s (%.0f changes) | ≤ %s (`--watch-history-bytes`) |\n",
		mib(before.historyBytes), before.historyChanges, mib(at10k.historyBytes), at10k.historyChanges, mib(afterPatches.historyBytes), afterPatches.historyChanges, mib(float64(budget)))
	fmt.Fprintf(&sb, "| Go heap in use (bench process, apps apiserver included): before the apps / at 10,000 apps / after the 60 patches | %s / %s / %s | bounded: the history's budget plus one copy of each app |\n\n",
		mib(before.heap), mib(at10k.heap), mib(afterPatches.heap))
	return sb.String()
}
