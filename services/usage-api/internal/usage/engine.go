package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
)

// Config is where the samples are and how they were taken.
type Config struct {
	// URL is the metrics store's Prometheus query API (VictoriaMetrics: http://host:8428).
	URL string
	// Resolution is the scrape interval of the metrics sources, the grid reports are exact to.
	Resolution time.Duration
	// MaxGap is how long a pod keeps its latest sample while its source is not known to be up.
	MaxGap time.Duration
	// SchedulerJob is the job label of the scrape of kube-scheduler's /metrics/resources.
	SchedulerJob string
}

// Tenant is a tenant in a report's scope.
type Tenant struct{ Name, Namespace string }

// Release names a Helm release in a namespace: what a pod's app.kubernetes.io/instance label
// names.
type Release struct{ Namespace, Name string }

// Scope is what one report covers.
type Scope struct {
	// Tenants are the reported tenant and its descendants, in the order the report lists them.
	Tenants []Tenant
	// Apps attributes releases to apps; a pod of no release in it is unattributed.
	Apps map[Release]usagev1.WorkloadReference
	// Workload, if set, limits the report to that workload.
	Workload *usagev1.WorkloadReference
}

// Period is a report's time: [Start, End) cut into intervals of Step; End-Start is a multiple of
// Step.
type Period struct {
	Start, End time.Time
	Step       time.Duration
}

// ErrUnavailable wraps every failure to reach the metrics store: the report cannot be made, and
// nothing partial is returned.
var ErrUnavailable = errors.New("the metrics store is unavailable")

// Engine makes reports.
type Engine struct {
	cfg Config
	api promv1.API
}

// New returns an engine querying cfg.URL.
func New(cfg Config) (*Engine, error) {
	c, err := promapi.NewClient(promapi.Config{Address: cfg.URL, RoundTripper: noCache{next: http.DefaultTransport}})
	if err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, api: promv1.NewAPI(c)}, nil
}

// noCache asks VictoriaMetrics not to answer from, nor align queries to, its response cache:
// alignment would move the report's intervals.
type noCache struct{ next http.RoundTripper }

func (n noCache) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	q := r.URL.Query()
	q.Set("nocache", "1")
	r.URL.RawQuery = q.Encode()
	return n.next.RoundTrip(r)
}

// key is one consumer: a workload of a namespace in one interval.
type key struct {
	namespace string
	workload  usagev1.WorkloadReference
	interval  int
}

// sums are resource × seconds: core-seconds and byte-seconds.
type sums struct{ cpu, memory, ephemeral float64 }

// Queries are what a report asks the metrics store: Requests and, if the scheduler was not up
// at every instant (Up over UpRange), Gaps, over Range (range queries); Labels at the period's
// end (an instant query).
type Queries struct {
	Requests, Gaps, Up, Labels string
	Range, UpRange             promv1.Range
}

// Queries returns the queries Report makes for s over p.
func (e *Engine) Queries(s Scope, p Period) Queries {
	namespaces := make([]string, len(s.Tenants))
	for i, t := range s.Tenants {
		namespaces[i] = t.Namespace
	}
	res, job := e.cfg.Resolution, e.cfg.SchedulerJob
	// The first grid instant in (Start, End]: the grid is multiples of res since the Unix epoch.
	first := time.UnixMilli((p.Start.UnixMilli()/res.Milliseconds() + 1) * res.Milliseconds())
	return Queries{
		Requests: requestQuery(namespaces, job, res, p.Step),
		Gaps:     gapQuery(namespaces, job, res, e.cfg.MaxGap, p.Step),
		Up:       upQuery(job, res),
		Labels:   labelsQuery(namespaces, p.End.Sub(p.Start)+res),
		Range:    promv1.Range{Start: p.Start.Add(p.Step), End: p.End, Step: p.Step},
		UpRange:  promv1.Range{Start: first, End: p.End, Step: res},
	}
}

// Report computes the usage of s over p.
func (e *Engine) Report(ctx context.Context, s Scope, p Period) (usagev1.Report, error) {
	report := usagev1.Report{Resolution: metav1.Duration{Duration: e.cfg.Resolution}}
	q := e.Queries(s, p)
	requests, err := e.matrix(ctx, q.Requests, q.Range)
	if err != nil {
		return report, err
	}
	// The gap rule costs most of a report's time; it is asked only if it can count anything.
	gaps, err := e.gaps(ctx, q.Up, q.UpRange)
	if err != nil {
		return report, err
	}
	if gaps {
		held, err := e.matrix(ctx, q.Gaps, q.Range)
		if err != nil {
			return report, err
		}
		requests = append(requests, held...)
	}
	labels, _, err := e.api.Query(ctx, q.Labels, p.End)
	if err != nil {
		return report, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	type pod struct{ namespace, name string }
	release := map[pod]string{} // a pod's app.kubernetes.io/instance; a label seen set wins
	if v, ok := labels.(model.Vector); ok {
		for _, smp := range v {
			if k := (pod{string(smp.Metric["namespace"]), string(smp.Metric["pod"])}); release[k] == "" {
				release[k] = string(smp.Metric[labelInstance])
			}
		}
	}
	intervals := int(p.End.Sub(p.Start) / p.Step)
	used := map[key]*sums{}
	for _, series := range requests {
		ns := string(series.Metric["namespace"])
		workload, ok := s.Apps[Release{ns, release[pod{ns, string(series.Metric["pod"])}]}]
		if !ok {
			workload = usagev1.WorkloadReference{Name: usagev1.Unattributed}
		}
		if s.Workload != nil && workload != *s.Workload {
			continue
		}
		for _, v := range series.Values {
			i := int(v.Timestamp.Time().Sub(p.Start)/p.Step) - 1
			if i < 0 || i >= intervals || math.IsNaN(float64(v.Value)) {
				continue
			}
			k := key{ns, workload, i}
			if used[k] == nil {
				used[k] = &sums{}
			}
			seconds := float64(v.Value) * e.cfg.Resolution.Seconds()
			switch series.Metric["resource"] {
			case resourceCPU:
				used[k].cpu += seconds
			case resourceMemory:
				used[k].memory += seconds
			case resourceEphemeralStorage:
				used[k].ephemeral += seconds
			}
		}
	}
	report.Consumers, report.Total = consumers(s.Tenants, p, used)
	return report, nil
}

// matrix asks a range query.
func (e *Engine) matrix(ctx context.Context, query string, r promv1.Range) (model.Matrix, error) {
	v, _, err := e.api.QueryRange(ctx, query, r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%w: the query answered %s, not a matrix", ErrUnavailable, v.Type())
	}
	return m, nil
}

// maxPoints is the most instants one range query asks for: VictoriaMetrics refuses more than
// -search.maxPointsPerTimeseries (30,000 by default).
const maxPoints = 10000

// gaps tells whether the scheduler was not known to be up at some instant of r (a step of the
// resolution), asking up in pieces of maxPoints instants.
func (e *Engine) gaps(ctx context.Context, up string, r promv1.Range) (bool, error) {
	for start := r.Start; !start.After(r.End); start = start.Add(maxPoints * r.Step) {
		end := start.Add((maxPoints - 1) * r.Step)
		if end.After(r.End) {
			end = r.End
		}
		m, err := e.matrix(ctx, up, promv1.Range{Start: start, End: end, Step: r.Step})
		if err != nil {
			return false, err
		}
		want := int(end.Sub(start)/r.Step) + 1
		if len(m) != 1 || len(m[0].Values) != want {
			return true, nil
		}
		for _, v := range m[0].Values {
			if v.Value != 1 {
				return true, nil
			}
		}
	}
	return false, nil
}

// consumers lists used in the tenants' order, then by workload and interval, with the total.
func consumers(tenants []Tenant, p Period, used map[key]*sums) ([]usagev1.Consumer, usagev1.Consumptions) {
	order := map[string]int{}
	for i, t := range tenants {
		order[t.Namespace] = i
	}
	keys := make([]key, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(order[a.namespace], order[b.namespace]), cmp.Compare(a.workload.Kind, b.workload.Kind),
			cmp.Compare(a.workload.Name, b.workload.Name), cmp.Compare(a.interval, b.interval))
	})
	var total sums
	out := make([]usagev1.Consumer, 0, len(keys))
	for _, k := range keys {
		u := used[k]
		total.cpu, total.memory, total.ephemeral = total.cpu+u.cpu, total.memory+u.memory, total.ephemeral+u.ephemeral
		start := p.Start.Add(time.Duration(k.interval) * p.Step)
		out = append(out, usagev1.Consumer{
			Tenant: tenants[order[k.namespace]].Name, Namespace: k.namespace, Workload: k.workload,
			StartTimestamp: metav1.NewTime(start), EndTimestamp: metav1.NewTime(start.Add(p.Step)),
			Consumptions: u.consumptions(),
		})
	}
	return out, total.consumptions()
}

const gib = 1 << 30

func (u sums) consumptions() usagev1.Consumptions {
	return usagev1.Consumptions{
		VCPUHours:                decimal(u.cpu / 3600),
		MemoryGiBHours:           decimal(u.memory / 3600 / gib),
		EphemeralStorageGiBHours: decimal(u.ephemeral / 3600 / gib),
	}
}

// decimal writes v as the shortest decimal string that reads back as v.
func decimal(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
