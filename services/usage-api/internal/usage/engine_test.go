package usage_test

import (
	"context"
	"fmt"
	"maps"
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
	ksm    = "kube-state-metrics"
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

func (h *history) add(k int, v float64, labels ...string) {
	m := map[string]string{}
	for i := 0; i < len(labels); i += 2 {
		m[labels[i]] = labels[i+1]
	}
	h.samples = append(h.samples, sample{m, v, h.at(k)})
}

// pod writes one scrape of a pod's requests as the scheduler exports them.
func (h *history) pod(k int, source, ns, pod, node string, cpu, memGiB, ephGiB float64) {
	for _, r := range []struct {
		name, unit string
		v          float64
	}{{"cpu", "cores", cpu}, {"memory", "bytes", memGiB * (1 << 30)}, {"ephemeral-storage", "bytes", ephGiB * (1 << 30)}} {
		h.add(k, r.v, "__name__", "kube_pod_resource_request", "job", job, "instance", source, "namespace", ns, "pod", pod,
			"node", node, "resource", r.name, "unit", r.unit, "scheduler", "default-scheduler", "priority", "0")
	}
}

// claim writes one scrape of a claim as kube-state-metrics exports it: its info (naming its
// volume once bound), its phase, its labels, and its volume's capacity.
func (h *history) claim(k int, source, ns, name, class, phase, volume string, capGiB float64, instance string) {
	h.add(k, 1, "__name__", "kube_persistentvolumeclaim_info", "job", ksm, "instance", source, "namespace", ns,
		"persistentvolumeclaim", name, "storageclass", class, "volumename", map[bool]string{true: volume}[phase != "Pending"], "volumemode", "Filesystem")
	for _, p := range []string{"Pending", "Bound", "Lost"} {
		h.add(k, map[bool]float64{true: 1}[p == phase], "__name__", "kube_persistentvolumeclaim_status_phase", "job", ksm,
			"instance", source, "namespace", ns, "persistentvolumeclaim", name, "phase", p)
	}
	h.add(k, 1, "__name__", "kube_persistentvolumeclaim_labels", "job", ksm, "instance", source, "namespace", ns,
		"persistentvolumeclaim", name, "label_app_kubernetes_io_instance", instance)
	if volume != "" {
		h.add(k, capGiB*(1<<30), "__name__", "kube_persistentvolume_capacity_bytes", "job", ksm, "instance", source, "persistentvolume", volume)
	}
}

// release writes one scrape of a HelmRelease as kube-state-metrics exports it with the chart's
// custom resource state (deploy/charts/usage-api/files/kube-state-metrics/apps.yaml).
func (h *history) release(k int, namespace, target, release, kind, name string) {
	h.add(k, 1, "__name__", "flotilla_app_release_info", "job", ksm, "instance", "ksm-1", "namespace", namespace,
		"target_namespace", target, "release", release, "app_kind", kind, "app_name", name,
		"customresource_group", "helm.toolkit.fluxcd.io", "customresource_kind", "HelmRelease", "customresource_version", "v2")
}

func (h *history) up(k int, job, source string, v float64) {
	h.add(k, v, "__name__", "up", "job", job, "instance", source)
}

func (h *history) labels(k int, ns, pod, instance string) {
	h.add(k, 1, "__name__", "kube_pod_labels", "job", ksm, "namespace", ns, "pod", pod, "label_app_kubernetes_io_instance", instance)
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

// object is what the report counts in one of its figures: a pod's resource, or a claim's storage
// class ("storage/<class>").
type object struct{ ns, name, resource string }

// expected computes the report's figures from the raw samples by the API's contract, without
// the metrics store: at each grid instant in (start, end], a pod or claim counts at its latest
// sample of the resolution before the instant, or, while its source was not up in that
// resolution, its latest sample of the last maxGap; the same object from two sources counts
// once. A claim counts while Bound, at the capacity of the volume it names. The result is
// keyed by namespace/kind/name/interval/resource.
func (h *history) expected(apps map[usage.Release]usagev1.WorkloadReference, namespaces []string, start, end time.Time, step time.Duration) map[string]float64 {
	bySeries := map[string][]sample{} // every series, by its labels
	for _, s := range h.samples {
		id := fmt.Sprint(s.labels)
		bySeries[id] = append(bySeries[id], s)
	}
	// latest is every series' latest sample in (from, to], with its labels.
	latest := func(from, to time.Time) []sample {
		var out []sample
		for _, ss := range bySeries {
			var l *sample
			for i := range ss {
				if ss[i].at.After(from) && !ss[i].at.After(to) && (l == nil || ss[i].at.After(l.at)) {
					l = &ss[i]
				}
			}
			if l != nil {
				out = append(out, *l)
			}
		}
		return out
	}
	instance := map[[3]string]string{} // namespace, pod, claim
	for _, s := range h.samples {
		switch s.labels["__name__"] {
		case "kube_pod_labels", "kube_persistentvolumeclaim_labels":
			instance[[3]string{s.labels["namespace"], s.labels["pod"], s.labels["persistentvolumeclaim"]}] = s.labels["label_app_kubernetes_io_instance"]
		}
	}
	// values are the objects of one source counted at an instant, from the latest samples of a window.
	values := func(window []sample, source string) map[object]float64 {
		out := map[object]float64{}
		capacity, bound := map[string]float64{}, map[[2]string]bool{}
		for _, s := range window {
			switch l := s.labels; l["__name__"] {
			case "kube_persistentvolume_capacity_bytes":
				capacity[l["persistentvolume"]] = math.Max(capacity[l["persistentvolume"]], s.value)
			case "kube_persistentvolumeclaim_status_phase":
				if l["phase"] == "Bound" && s.value == 1 {
					bound[[2]string{l["namespace"], l["persistentvolumeclaim"]}] = true
				}
			}
		}
		for _, s := range window {
			l := s.labels
			if !slices.Contains(namespaces, l["namespace"]) {
				continue
			}
			switch {
			case source == job && l["__name__"] == "kube_pod_resource_request" && l["node"] != "":
				k := object{l["namespace"], l["pod"], l["resource"]}
				out[k] = math.Max(out[k], s.value)
			case source == ksm && l["__name__"] == "kube_persistentvolumeclaim_info" && l["volumename"] != "":
				c, ok := capacity[l["volumename"]]
				if ok && bound[[2]string{l["namespace"], l["persistentvolumeclaim"]}] {
					k := object{l["namespace"], "claim:" + l["persistentvolumeclaim"], "storage/" + l["storageclass"]}
					out[k] = math.Max(out[k], c)
				}
			}
		}
		return out
	}
	out := map[string]float64{}
	first := start.Truncate(res)
	for p := first.Add(res); !p.After(end); p = p.Add(res) {
		if !p.After(start) {
			continue
		}
		interval := int((p.Sub(start) - 1) / step)
		recent, held := latest(p.Add(-res), p), latest(p.Add(-maxGap), p)
		for _, source := range []string{job, ksm} {
			up := false
			for _, s := range recent {
				if s.labels["__name__"] == "up" && s.labels["job"] == source && s.value == 1 {
					up = true
				}
			}
			a := values(recent, source)
			if !up {
				for k, v := range values(held, source) {
					if _, ok := a[k]; !ok {
						a[k] = v
					}
				}
			}
			for k, v := range a {
				id := [3]string{k.ns, k.name, ""}
				if name, ok := strings.CutPrefix(k.name, "claim:"); ok {
					id = [3]string{k.ns, "", name}
				}
				w, ok := apps[usage.Release{Namespace: k.ns, Name: instance[id]}]
				if !ok {
					w = usagev1.WorkloadReference{Name: usagev1.Unattributed}
				}
				out[fmt.Sprintf("%s/%s/%s/%d/%s", k.ns, w.Kind, w.Name, interval, k.resource)] += v * res.Seconds()
			}
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
		stateDown := k >= 600 && k < 608  // kube-state-metrics restarts
		if storeDown {
			continue
		}
		h.up(k, job, "sched-1", map[bool]float64{true: 0, false: 1}[sourceDown])
		h.up(k, ksm, "ksm-1", map[bool]float64{true: 0, false: 1}[stateDown])
		if !stateDown {
			// acme's database volume: pending, bound, resized at 300, deleted at 650 (its
			// volume stays, released, for a while); a volume of no class and no app; the
			// child tenant's cache volume, bound, then lost; beta's volume.
			switch {
			case k < 50:
				h.claim(k, "ksm-1", "tenant-acme", "data-db-0", "replicated", "Pending", "pv-1", 10, "postgres-db")
			case k < 300:
				h.claim(k, "ksm-1", "tenant-acme", "data-db-0", "replicated", "Bound", "pv-1", 10, "postgres-db")
			case k < 650:
				h.claim(k, "ksm-1", "tenant-acme", "data-db-0", "replicated", "Bound", "pv-1", 20, "postgres-db")
			case k < 670:
				h.add(k, 20*(1<<30), "__name__", "kube_persistentvolume_capacity_bytes", "job", ksm, "instance", "ksm-1", "persistentvolume", "pv-1")
			}
			if k >= 200 && k < 260 { // a second kube-state-metrics replica
				h.up(k, ksm, "ksm-2", 1)
				h.claim(k, "ksm-2", "tenant-acme", "data-db-0", "replicated", "Bound", "pv-1", 10, "postgres-db")
			}
			h.claim(k, "ksm-1", "tenant-acme", "scratch", "", "Bound", "pv-2", 1, "")
			switch {
			case k >= 100 && k < 200:
				h.claim(k, "ksm-1", "tenant-acme-dev", "cache", "local", "Bound", "pv-3", 5, "batch")
			case k >= 200 && k < 210:
				h.claim(k, "ksm-1", "tenant-acme-dev", "cache", "local", "Lost", "pv-3", 5, "batch")
			}
			h.claim(k, "ksm-1", "tenant-beta", "data-db-0", "replicated", "Bound", "pv-4", 50, "postgres-db")
		}
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
			// The app is deleted at 650: only the history of its HelmRelease names it then.
			h.release(k, "deliver-acme", "tenant-acme", "postgres-db", "Postgres", "db")
		}
		// A HelmRelease of the tenant's own, not in its delivery namespace, names nothing.
		h.release(k, "tenant-acme", "tenant-acme", "debug", "Postgres", "free")
		// A pod of no app, and a second scheduler replica exporting the same pods for a while.
		h.pod(k, "sched-1", "tenant-acme", "debug", "node-1", 0.1, 0.125, 0)
		h.labels(k, "tenant-acme", "debug", "debug")
		if k >= 200 && k < 260 {
			h.up(k, job, "sched-2", 1)
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

	engine, err := usage.New(usage.Config{URL: vm.URL, Resolution: res, MaxGap: maxGap, SchedulerJob: job, StateMetricsJob: ksm})
	if err != nil {
		t.Fatal(err)
	}
	apps := map[usage.Release]usagev1.WorkloadReference{
		{Namespace: "tenant-acme", Name: "postgres-db"}: {Kind: "Postgres", Name: "db"},
		{Namespace: "tenant-acme-dev", Name: "batch"}:   {Kind: "Job", Name: "batch"},
		{Namespace: "tenant-beta", Name: "postgres-db"}: {Kind: "Postgres", Name: "db"},
	}
	// The report sees the live apps: acme's db is gone.
	live := maps.Clone(apps)
	delete(live, usage.Release{Namespace: "tenant-acme", Name: "postgres-db"})
	scope := usage.Scope{
		Tenants: []usage.Tenant{{Name: "acme", Namespace: "tenant-acme", Delivery: "deliver-acme"},
			{Name: "dev", Namespace: "tenant-acme-dev", Delivery: "deliver-acme-dev"}},
		Apps: live,
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
			got := map[string]float64{}
			for _, c := range report.Consumers {
				if !c.StartTimestamp.Time.Before(c.EndTimestamp.Time) {
					t.Errorf("%+v: empty interval", c)
				}
				prefix := fmt.Sprintf("%s/%s/%s/%d/", c.Namespace, c.Workload.Kind, c.Workload.Name, int(c.StartTimestamp.Sub(tc.start)/tc.step))
				cs := c.Consumptions
				got[prefix+"cpu"] = parse(t, cs.VCPUHours) * 3600
				got[prefix+"memory"] = parse(t, cs.MemoryGiBHours) * 3600 * (1 << 30)
				got[prefix+"ephemeral-storage"] = parse(t, cs.EphemeralStorageGiBHours) * 3600 * (1 << 30)
				for _, s := range cs.PersistentStorageGiBHours {
					got[prefix+"storage/"+s.StorageClassName] = parse(t, s.GiBHours) * 3600 * (1 << 30)
				}
			}
			for k, w := range want {
				if !close(got[k], w) {
					t.Errorf("%s: got %v, want %v", k, got[k], w)
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok && g != 0 {
					t.Errorf("%s: reported %v, not expected", k, g)
				}
			}
			if len(want) < 10 {
				t.Fatalf("the history yields only %d figures: the test checks nothing", len(want))
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
