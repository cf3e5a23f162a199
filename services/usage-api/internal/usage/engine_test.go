package usage_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

const (
	res    = time.Minute
	maxGap = 10 * time.Minute
	job    = "kube-scheduler"
)

// sample is one raw sample of the history written into VictoriaMetrics.
type sample struct {
	labels map[string]string
	value  float64
	at     time.Time
}

// history builds a known past, scrape by scrape, 17 s after each minute with a jitter of up to
// ±3 s, as a real scrape loop has it.
type history struct {
	t0      time.Time
	samples []sample
}

func (h *history) at(k int) time.Time {
	jitter := time.Duration((k*7919)%7-3) * time.Second
	return h.t0.Add(time.Duration(k)*res + 17*time.Second + jitter)
}

// pod writes one scrape of a pod's requests as the scheduler exports them.
func (h *history) pod(k int, source, ns, pod, node string, cpu, memGiB, ephGiB float64) {
	for _, r := range []struct {
		name, unit string
		v          float64
	}{{"cpu", "cores", cpu}, {"memory", "bytes", memGiB * (1 << 30)}, {"ephemeral-storage", "bytes", ephGiB * (1 << 30)}} {
		h.samples = append(h.samples, sample{map[string]string{
			"__name__": "kube_pod_resource_request", "job": job, "instance": source, "namespace": ns, "pod": pod,
			"node": node, "resource": r.name, "unit": r.unit, "scheduler": "default-scheduler", "priority": "0",
		}, r.v, h.at(k)})
	}
}

func (h *history) up(k int, source string, v float64) {
	h.samples = append(h.samples, sample{map[string]string{"__name__": "up", "job": job, "instance": source}, v, h.at(k)})
}

func (h *history) labels(k int, ns, pod, instance string) {
	h.samples = append(h.samples, sample{map[string]string{
		"__name__": "kube_pod_labels", "job": "kube-state-metrics", "namespace": ns, "pod": pod,
		"label_app_kubernetes_io_instance": instance,
	}, 1, h.at(k)})
}

func (h *history) text() string {
	var b strings.Builder
	for _, s := range h.samples {
		var ls []string
		for k, v := range s.labels {
			if k != "__name__" {
				ls = append(ls, fmt.Sprintf("%s=%q", k, v))
			}
		}
		slices.Sort(ls)
		fmt.Fprintf(&b, "%s{%s} %s %d\n", s.labels["__name__"], strings.Join(ls, ","), strconv.FormatFloat(s.value, 'g', -1, 64), s.at.UnixMilli())
	}
	return b.String()
}

// expected computes the report's figures from the raw samples by the API's contract, without
// the metrics store: at each grid instant in (start, end], a pod counts at its latest sample of
// the resolution before the instant, or, while no source was up in that resolution, its latest
// sample of the last maxGap; the same pod from two sources counts once.
func (h *history) expected(apps map[usage.Release]usagev1.WorkloadReference, namespaces []string, start, end time.Time, step time.Duration) map[string][3]float64 {
	type series struct{ ns, pod, resource, key string }
	bySeries := map[series][]sample{}
	var ups []sample
	instance := map[usage.Release]string{}
	for _, s := range h.samples {
		switch s.labels["__name__"] {
		case "up":
			ups = append(ups, s)
		case "kube_pod_labels":
			instance[usage.Release{Namespace: s.labels["namespace"], Name: s.labels["pod"]}] = s.labels["label_app_kubernetes_io_instance"]
		case "kube_pod_resource_request":
			if s.labels["node"] == "" || !slices.Contains(namespaces, s.labels["namespace"]) {
				continue
			}
			sr := series{s.labels["namespace"], s.labels["pod"], s.labels["resource"], s.labels["instance"] + "/" + s.labels["node"]}
			bySeries[sr] = append(bySeries[sr], s)
		}
	}
	latest := func(ss []sample, from, to time.Time) (float64, bool) { // latest in (from, to]
		v, ok, at := 0.0, false, time.Time{}
		for _, s := range ss {
			if s.at.After(from) && !s.at.After(to) && (!ok || s.at.After(at)) {
				v, ok, at = s.value, true, s.at
			}
		}
		return v, ok
	}
	out := map[string][3]float64{}
	first := start.Truncate(res)
	for p := first.Add(res); !p.After(end); p = p.Add(res) {
		if !p.After(start) {
			continue
		}
		interval := int((p.Sub(start) - 1) / step)
		up := false
		if v, ok := latest(ups, p.Add(-res), p); ok && v == 1 {
			up = true
		}
		type pr struct{ ns, pod, resource string }
		a, b := map[pr]float64{}, map[pr]float64{}
		for sr, ss := range bySeries {
			k := pr{sr.ns, sr.pod, sr.resource}
			if v, ok := latest(ss, p.Add(-res), p); ok {
				a[k] = math.Max(a[k], v)
			}
			if v, ok := latest(ss, p.Add(-maxGap), p); ok {
				b[k] = math.Max(b[k], v)
			}
		}
		if !up {
			for k, v := range b {
				if _, ok := a[k]; !ok {
					a[k] = v
				}
			}
		}
		for k, v := range a {
			w, ok := apps[usage.Release{Namespace: k.ns, Name: instance[usage.Release{Namespace: k.ns, Name: k.pod}]}]
			if !ok {
				w = usagev1.WorkloadReference{Name: usagev1.Unattributed}
			}
			key := fmt.Sprintf("%s/%s/%s/%d", k.ns, w.Kind, w.Name, interval)
			sums := out[key]
			i := map[string]int{"cpu": 0, "memory": 1, "ephemeral-storage": 2}[k.resource]
			sums[i] += v * res.Seconds()
			out[key] = sums
		}
	}
	return out
}

func TestReportIsExactToTheSample(t *testing.T) {
	vm, err := testenv.StartVictoriaMetrics(t.TempDir(), testenv.VictoriaMetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Stop)

	h := &history{t0: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)}
	for k := 0; k < 720; k++ {
		storeDown := k >= 520 && k < 526  // nothing is scraped at all
		sourceDown := k >= 500 && k < 511 // the scheduler restarts: its scrapes fail
		if storeDown {
			continue
		}
		h.up(k, "sched-1", map[bool]float64{true: 0, false: 1}[sourceDown])
		if sourceDown {
			continue
		}
		// acme's database, resized at 300, rescheduled to another node at 400 (away for 20
		// scrapes), deleted at 650.
		switch {
		case k < 300:
			h.pod(k, "sched-1", "tenant-acme", "db-0", "node-1", 0.5, 1, 0.25)
		case k < 400:
			h.pod(k, "sched-1", "tenant-acme", "db-0", "node-1", 1, 2, 0.25)
		case k >= 420 && k < 650:
			h.pod(k, "sched-1", "tenant-acme", "db-0", "node-2", 1, 2, 0.25)
		}
		if k < 650 {
			h.labels(k, "tenant-acme", "db-0", "postgres-db")
		}
		// A pod of no app, and a second scheduler replica exporting the same pods for a while.
		h.pod(k, "sched-1", "tenant-acme", "debug", "node-1", 0.1, 0.125, 0)
		if k >= 200 && k < 260 {
			h.up(k, "sched-2", 1)
			h.pod(k, "sched-2", "tenant-acme", "debug", "node-1", 0.1, 0.125, 0)
		}
		// A job of the child tenant: pending (no node) first, then scheduled, then finished.
		if k >= 100 && k < 110 {
			h.pod(k, "sched-1", "tenant-acme-dev", "job-x", "", 2, 4, 1)
		}
		if k >= 110 && k < 150 {
			h.pod(k, "sched-1", "tenant-acme-dev", "job-x", "node-3", 2, 4, 1)
			h.labels(k, "tenant-acme-dev", "job-x", "batch")
		}
		// A sibling tenant: never in acme's report.
		h.pod(k, "sched-1", "tenant-beta", "db-0", "node-1", 8, 16, 1)
	}
	if err := vm.Import(h.text()); err != nil {
		t.Fatal(err)
	}

	engine, err := usage.New(usage.Config{URL: vm.URL, Resolution: res, MaxGap: maxGap, SchedulerJob: job})
	if err != nil {
		t.Fatal(err)
	}
	apps := map[usage.Release]usagev1.WorkloadReference{
		{Namespace: "tenant-acme", Name: "postgres-db"}: {Kind: "Postgres", Name: "db"},
		{Namespace: "tenant-acme-dev", Name: "batch"}:   {Kind: "Job", Name: "batch"},
		{Namespace: "tenant-beta", Name: "postgres-db"}: {Kind: "Postgres", Name: "db"},
	}
	scope := usage.Scope{
		Tenants: []usage.Tenant{{Name: "acme", Namespace: "tenant-acme"}, {Name: "dev", Namespace: "tenant-acme-dev"}},
		Apps:    apps,
	}
	for _, tc := range []struct {
		name       string
		start, end time.Time
		step       time.Duration
	}{
		{"whole history, one interval", h.t0, h.t0.Add(12 * time.Hour), 12 * time.Hour},
		{"hourly series", h.t0, h.t0.Add(12 * time.Hour), time.Hour},
		{"the source up throughout", h.t0.Add(time.Hour), h.t0.Add(5 * time.Hour), 30 * time.Minute},
		{"off the grid", h.t0.Add(95*time.Minute + 31*time.Second), h.t0.Add(545*time.Minute + 31*time.Second), 90 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			report, err := engine.Report(context.Background(), scope, usage.Period{Start: tc.start, End: tc.end, Step: tc.step})
			if err != nil {
				t.Fatal(err)
			}
			want := h.expected(apps, []string{"tenant-acme", "tenant-acme-dev"}, tc.start, tc.end, tc.step)
			got := map[string][3]float64{}
			for _, c := range report.Consumers {
				if !c.StartTimestamp.Time.Before(c.EndTimestamp.Time) {
					t.Errorf("%+v: empty interval", c)
				}
				interval := int(c.StartTimestamp.Sub(tc.start) / tc.step)
				got[fmt.Sprintf("%s/%s/%s/%d", c.Namespace, c.Workload.Kind, c.Workload.Name, interval)] = [3]float64{
					parse(t, c.Consumptions.VCPUHours) * 3600, parse(t, c.Consumptions.MemoryGiBHours) * 3600 * (1 << 30),
					parse(t, c.Consumptions.EphemeralStorageGiBHours) * 3600 * (1 << 30),
				}
			}
			for k, w := range want {
				for i := range w {
					if !close(got[k][i], w[i]) {
						t.Errorf("%s resource %d: got %v, want %v", k, i, got[k][i], w[i])
					}
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%s: reported, not expected", k)
				}
			}
			if len(want) < 3 {
				t.Fatalf("the history yields only %d consumers: the test checks nothing", len(want))
			}
		})
	}
}

func parse(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q is not a decimal: %v", s, err)
	}
	return v
}

func close(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}
