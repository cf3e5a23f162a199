package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"golang.org/x/sync/errgroup"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

const (
	workloads  = 1000
	namespaces = 50 // the root tenant's descendants, 20 workloads each
	days       = 7
	claimEvery = 5 // every fifth workload has a bound claim
	// The scheduler restarts in the middle of the period: its scrapes fail for 5 minutes.
	outageFrom = days * 24 * 60 / 2
	outageTo   = outageFrom + 5
	res        = time.Minute
	runs       = 7
)

// scenario is one history the report is measured over.
type scenario struct {
	// extended adds a bound claim to every fifth workload and a restart of the scheduler (its
	// scrapes failing for 5 minutes) in the middle of the period.
	extended bool
}

// result is what one scenario measured.
type result struct {
	samples        int
	loading        time.Duration
	direct, report time.Duration
}

func BenchmarkRootReport(b *testing.B) {
	issue := measure(b, scenario{})
	extended := measure(b, scenario{extended: true})
	ratio := float64(issue.report) / float64(issue.direct)
	b.ReportMetric(ratio, "report/direct")
	b.ReportMetric(issue.report.Seconds(), "p50-s")
	b.ReportMetric(float64(extended.report)/float64(extended.direct), "extended-report/direct")
	b.ReportMetric(extended.report.Seconds(), "extended-p50-s")
	body := fmt.Sprintf(`## usage-api

A UsageReport for the root tenant over %d workloads (in %d descendants) × %d days of %s samples in
a real VictoriaMetrics, made by the usage engine, against the same MetricsQL queries asked directly
over HTTP in the same run, with the same concurrency (median of %d alternated runs after one
warm-up each). Two histories, each in a store of its own: the issue's (each workload's pod, the
scheduler scraped throughout; %s samples loaded in %s), and an extended one where every fifth
workload also has a bound claim and the scheduler restarts once in the middle, its scrapes failing
for 5 minutes, so that the report also asks the claims' query and holds the pods' values over those
instants (%s samples loaded in %s). Both check the totals: the held time is neither lost nor added.

| history | the same queries, asked directly | the report (queries, attribution, sums) | ratio | goal |
|---|---|---|---|---|
| the issue's: pods, no outage | %s | %s | %.2f× | report ≤ 1 s, ratio ≤ 1.3× |
| extended: claims, a scheduler restart | %s | %s | %.2f× | reported |
`, workloads, namespaces, days, res, runs, humanCount(issue.samples), issue.loading.Round(time.Second),
		humanCount(extended.samples), extended.loading.Round(time.Second),
		issue.direct.Round(time.Millisecond), issue.report.Round(time.Millisecond), ratio,
		extended.direct.Round(time.Millisecond), extended.report.Round(time.Millisecond), float64(extended.report)/float64(extended.direct))
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := testenv.WriteBenchSection(out, "usage-api", body); err != nil {
			b.Fatal(err)
		}
	}
	b.Log(body)
}

// measure loads sc's history into a VictoriaMetrics of its own and times the root tenant's report
// and the same queries asked directly, alternated, checking the report's figures.
func measure(b *testing.B, sc scenario) result {
	vm, err := testenv.StartVictoriaMetrics(b.TempDir(), testenv.VictoriaMetricsOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Stop()
	end := time.Now().Truncate(time.Hour)
	start := end.Add(-days * 24 * time.Hour)
	began := time.Now()
	var out result
	if out.samples, err = load(vm, start, end, sc); err != nil {
		b.Fatal(err)
	}
	out.loading = time.Since(began)

	engine, err := usage.New(usage.Config{URL: vm.URL, Resolution: res, MaxGap: 10 * time.Minute,
		SchedulerJob: "kube-scheduler", StateMetricsJob: "kube-state-metrics"})
	if err != nil {
		b.Fatal(err)
	}
	scope := usage.Scope{Tenants: []usage.Tenant{{Name: "root", Namespace: "tenant-root"}}}
	for i := range namespaces {
		scope.Tenants = append(scope.Tenants, usage.Tenant{Name: fmt.Sprintf("t%02d", i), Namespace: fmt.Sprintf("tenant-t%02d", i)})
	}
	scope.Apps = map[usage.Release]usagev1.WorkloadReference{}
	for w := range workloads {
		if w%10 != 0 {
			scope.Apps[usage.Release{Namespace: fmt.Sprintf("tenant-t%02d", w%namespaces), Name: fmt.Sprintf("app-%04d", w)}] =
				usagev1.WorkloadReference{Kind: "Postgres", Name: fmt.Sprintf("db-%04d", w)}
		}
	}
	period := usage.Period{Start: start, End: end, Step: end.Sub(start)}
	q := engine.Queries(scope, period)
	// The instants without a scrape of the scheduler: each stands for the minute before it.
	var outage *promv1.Range
	if sc.extended {
		outage = &promv1.Range{Start: start.Add((outageFrom + 1) * res), End: start.Add(outageTo * res), Step: res}
	}
	ctx := context.Background()

	// Alternate the two so that both see the same machine; the first of each warms caches.
	var direct, report []time.Duration
	var consumers int
	for i := range runs + 1 {
		t0 := time.Now()
		if err := raw(vm.URL, q, outage); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		t0 = time.Now()
		r, err := engine.Report(ctx, scope, period)
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			direct, report = append(direct, d), append(report, time.Since(t0))
		}
		consumers = len(r.Consumers)
		if cpu, want := parse(r.Total.VCPUHours), float64(workloads)*0.25*days*24; math.Abs(cpu-want) > 1e-9*want {
			b.Fatalf("the report's total is %v vCPU-hours, want %v: time was lost or added", cpu, want)
		}
		storage := r.Total.PersistentStorageGiBHours
		if want := float64(workloads / claimEvery * 10 * days * 24); sc.extended &&
			(len(storage) != 1 || storage[0].StorageClassName != "replicated" || math.Abs(parse(storage[0].GiBHours)-want) > 1e-9*want) {
			b.Fatalf("the report's persistent storage is %+v, want %v GiB-hours of replicated", storage, want)
		}
	}
	// One consumer per app, and per namespace holding a workload of no app (every tenth).
	unattributed := map[int]bool{}
	for w := 0; w < workloads; w += 10 {
		unattributed[w%namespaces] = true
	}
	if want := len(scope.Apps) + len(unattributed); consumers != want {
		b.Fatalf("the report has %d consumers, want %d", consumers, want)
	}
	out.direct, out.report = testenv.Median(direct), testenv.Median(report)
	return out
}

// load writes the history: per workload a pod with constant requests (cpu and memory) and its
// labels, each minute of the period, and the scheduler's up; every tenth pod of no app.
func load(vm *testenv.VictoriaMetrics, start, end time.Time, sc scenario) (int, error) {
	pr, pw := io.Pipe()
	var stamps []int64
	for t := start.Add(17 * time.Second); t.Before(end); t = t.Add(res) {
		stamps = append(stamps, t.UnixMilli())
	}
	go func() {
		enc := json.NewEncoder(pw)
		line := func(metric map[string]string, v float64) error {
			values, at := make([]float64, 0, len(stamps)), make([]int64, 0, len(stamps))
			for i, t := range stamps {
				switch {
				case !sc.extended || metric["job"] != "kube-scheduler" || i < outageFrom || i >= outageTo:
					values, at = append(values, v), append(at, t)
				case metric["__name__"] == "up": // the scheduler restarts: its scrapes fail
					values, at = append(values, 0), append(at, t)
				}
			}
			return enc.Encode(map[string]any{"metric": metric, "values": values, "timestamps": at})
		}
		err := line(map[string]string{"__name__": "up", "job": "kube-scheduler", "instance": "sched"}, 1)
		if err == nil {
			err = line(map[string]string{"__name__": "up", "job": "kube-state-metrics", "instance": "ksm"}, 1)
		}
		for w := 0; w < workloads && err == nil; w++ {
			ns, pod := fmt.Sprintf("tenant-t%02d", w%namespaces), fmt.Sprintf("app-%04d-0", w)
			for _, r := range []struct {
				name, unit string
				v          float64
			}{{"cpu", "cores", 0.25}, {"memory", "bytes", 512 << 20}} {
				if err = line(map[string]string{"__name__": "kube_pod_resource_request", "job": "kube-scheduler", "namespace": ns, "pod": pod,
					"node": fmt.Sprintf("node-%d", w%20), "resource": r.name, "unit": r.unit}, r.v); err != nil {
					break
				}
			}
			instance := fmt.Sprintf("app-%04d", w)
			if w%10 == 0 {
				instance = ""
			}
			if err == nil {
				err = line(map[string]string{"__name__": "kube_pod_labels", "job": "kube-state-metrics", "namespace": ns, "pod": pod,
					"label_app_kubernetes_io_instance": instance}, 1)
			}
			if sc.extended && w%claimEvery == 0 && err == nil {
				claim, volume := "data-"+pod, fmt.Sprintf("pv-%04d", w)
				for _, m := range []map[string]string{
					{"__name__": "kube_persistentvolumeclaim_info", "storageclass": "replicated", "volumename": volume},
					{"__name__": "kube_persistentvolumeclaim_status_phase", "phase": "Bound"},
					{"__name__": "kube_persistentvolumeclaim_labels", "label_app_kubernetes_io_instance": instance},
				} {
					m["job"], m["namespace"], m["persistentvolumeclaim"] = "kube-state-metrics", ns, claim
					if err = line(m, 1); err != nil {
						break
					}
				}
				if err == nil {
					err = line(map[string]string{"__name__": "kube_persistentvolume_capacity_bytes", "job": "kube-state-metrics",
						"persistentvolume": volume}, 10<<30)
				}
			}
		}
		pw.CloseWithError(err)
	}()
	resp, err := http.Post(vm.URL+"/api/v1/import", "application/json", pr)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("import: %s", resp.Status)
	}
	if resp, err = http.Get(vm.URL + "/internal/force_flush"); err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	if !sc.extended {
		return len(stamps) * (2 + workloads*3), nil
	}
	return len(stamps)*(2+workloads*3+workloads/claimEvery*4) - (outageTo-outageFrom)*workloads*2, nil
}

// raw asks the report's queries directly, as a client of VictoriaMetrics would, reading the
// whole answers: each source's queries one after the other, the sources and the labels at once,
// as the engine asks them.
func raw(base string, q usage.Queries, outage *promv1.Range) error {
	rangeQuery := func(query string, r promv1.Range) string {
		return base + "/api/v1/query_range?" + url.Values{"query": {query}, "start": {unix(r.Start)}, "end": {unix(r.End)},
			"step": {strconv.FormatFloat(r.Step.Seconds(), 'f', -1, 64)}, "nocache": {"1"}}.Encode()
	}
	get := func(urls ...string) error {
		for _, u := range urls {
			resp, err := http.Get(u)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %v", resp.Status, err)
			}
		}
		return nil
	}
	// Up is asked in pieces of 10,000 instants, as the engine asks it; the scheduler's held values
	// over its outage, if it had one.
	ups := func(up string) []string {
		var out []string
		r := q.UpRange
		for start := r.Start; !start.After(r.End); start = start.Add(10000 * r.Step) {
			end := start.Add(9999 * r.Step)
			if end.After(r.End) {
				end = r.End
			}
			out = append(out, rangeQuery(up, promv1.Range{Start: start, End: end, Step: r.Step}))
		}
		return out
	}
	var g errgroup.Group
	g.Go(func() error {
		pods := slices.Concat([]string{rangeQuery(q.Pods.Integral, q.Range)}, ups(q.Pods.Up))
		if outage != nil {
			pods = append(pods, rangeQuery(q.Pods.Held, *outage))
		}
		return get(pods...)
	})
	g.Go(func() error {
		return get(slices.Concat([]string{rangeQuery(q.Claims.Integral, q.Range)}, ups(q.Claims.Up))...)
	})
	for _, query := range []string{q.Labels, q.Releases} {
		g.Go(func() error {
			return get(base + "/api/v1/query?" + url.Values{"query": {query}, "time": {unix(q.Range.End)}, "nocache": {"1"}}.Encode())
		})
	}
	return g.Wait()
}

func parse(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', -1, 64) }

func humanCount(n int) string { return fmt.Sprintf("%.1f M", float64(n)/1e6) }
