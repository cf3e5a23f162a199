package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

const (
	workloads  = 1000
	namespaces = 50 // the root tenant's descendants, 20 workloads each
	days       = 7
	res        = time.Minute
	runs       = 7
)

func BenchmarkRootReport(b *testing.B) {
	dir := b.TempDir()
	vm, err := testenv.StartVictoriaMetrics(dir, testenv.VictoriaMetricsOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Stop()
	end := time.Now().Truncate(time.Hour)
	start := end.Add(-days * 24 * time.Hour)
	began := time.Now()
	samples, err := load(vm, start, end)
	if err != nil {
		b.Fatal(err)
	}
	loading := time.Since(began)

	engine, err := usage.New(usage.Config{URL: vm.URL, Resolution: res, MaxGap: 10 * time.Minute, SchedulerJob: "kube-scheduler"})
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
	ctx := context.Background()

	// Alternate the two so that both see the same machine; the first of each warms caches.
	var direct, report []time.Duration
	var consumers int
	for i := range runs + 1 {
		t0 := time.Now()
		if err := raw(vm.URL, q); err != nil {
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
	}
	// One consumer per app, and per namespace holding a workload of no app (every tenth).
	unattributed := map[int]bool{}
	for w := 0; w < workloads; w += 10 {
		unattributed[w%namespaces] = true
	}
	if want := len(scope.Apps) + len(unattributed); consumers != want {
		b.Fatalf("the report has %d consumers, want %d", consumers, want)
	}
	ratio := float64(median(report)) / float64(median(direct))
	b.ReportMetric(ratio, "report/direct")
	b.ReportMetric(median(report).Seconds(), "p50-s")
	body := fmt.Sprintf(`## usage-api

A UsageReport for the root tenant over %d workloads (in %d descendants) × %d days of %s samples
(%s samples of kube-scheduler's requests and kube-state-metrics' labels, loaded in %s) in a real
VictoriaMetrics, made by the usage engine, against the same MetricsQL queries asked directly over
HTTP in the same run (median of %d alternated runs after one warm-up each). The scheduler was
scraped throughout, so the report asks no gap query; a period with an outage of the scheduler
or the store adds that query, about 1.9 s here when last measured (2026-12-02).

| | median | goal |
|---|---|---|
| the same queries, asked directly | %s | |
| the report (queries, attribution, sums) | %s | ≤ 1 s |
| ratio | %.2f× | ≤ 1.3× |
`, workloads, namespaces, days, res, humanCount(samples), loading.Round(time.Second), runs,
		median(direct).Round(time.Millisecond), median(report).Round(time.Millisecond), ratio)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := testenv.WriteBenchSection(out, "usage-api", body); err != nil {
			b.Fatal(err)
		}
	}
	b.Log(body)
}

// load writes the history: per workload a pod with constant requests (cpu and memory) and its
// labels, each minute of the period, and the scheduler's up; every tenth pod of no app.
func load(vm *testenv.VictoriaMetrics, start, end time.Time) (int, error) {
	pr, pw := io.Pipe()
	var stamps []int64
	for t := start.Add(17 * time.Second); t.Before(end); t = t.Add(res) {
		stamps = append(stamps, t.UnixMilli())
	}
	go func() {
		enc := json.NewEncoder(pw)
		line := func(metric map[string]string, v float64) error {
			values := make([]float64, len(stamps))
			for i := range values {
				values[i] = v
			}
			return enc.Encode(map[string]any{"metric": metric, "values": values, "timestamps": stamps})
		}
		err := line(map[string]string{"__name__": "up", "job": "kube-scheduler", "instance": "sched"}, 1)
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
	return len(stamps) * (1 + workloads*3), nil
}

// raw asks the report's queries directly, as a client of VictoriaMetrics would, reading the
// whole answers.
func raw(base string, q usage.Queries) error {
	rangeQuery := func(query string, r promv1.Range) string {
		return base + "/api/v1/query_range?" + url.Values{"query": {query}, "start": {unix(r.Start)}, "end": {unix(r.End)},
			"step": {strconv.FormatFloat(r.Step.Seconds(), 'f', -1, 64)}, "nocache": {"1"}}.Encode()
	}
	// The scheduler was up throughout: the report asks no gap query.
	for _, u := range []string{
		rangeQuery(q.Requests, q.Range), rangeQuery(q.Up, q.UpRange),
		base + "/api/v1/query?" + url.Values{"query": {q.Labels}, "time": {unix(q.Range.End)}, "nocache": {"1"}}.Encode(),
	} {
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

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', -1, 64) }

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func humanCount(n int) string { return fmt.Sprintf("%.1f M", float64(n)/1e6) }
