package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
)

// Config is where the samples are and how they were taken.
type Config struct {
	// URL is the metrics store's Prometheus query API (VictoriaMetrics: http://host:8428).
	URL string
	// Resolution is the scrape interval of the metrics sources, the grid reports are exact to.
	Resolution time.Duration
	// MaxGap is how long an object keeps its latest sample while its source is not known to be up.
	MaxGap time.Duration
	// SchedulerJob is the job label of the scrape of kube-scheduler's /metrics/resources.
	SchedulerJob string
	// StateMetricsJob is the job label of the scrape of kube-state-metrics.
	StateMetricsJob string
}

// Tenant is a tenant in a report's scope: its name, its namespace, and the namespace its apps'
// HelmReleases are stored in (the apps API's delivery namespace, which tenants cannot write).
type Tenant struct{ Name, Namespace, Delivery string }

// Release names a Helm release in a namespace: what a pod's or claim's app.kubernetes.io/instance
// label names.
type Release struct{ Namespace, Name string }

// Scope is what one report covers.
type Scope struct {
	// Tenants are the reported tenant and its descendants, in the order the report lists them.
	Tenants []Tenant
	// Apps attributes the live releases to apps. Releases of apps deleted since are attributed
	// from the metrics store's history of HelmReleases (kube-state-metrics' flotilla_app_release_info,
	// from a tenant's Delivery namespace only). A pod or claim of no app's release is unattributed.
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

// sums are resource × seconds: core-seconds and byte-seconds, storage per class.
type sums struct {
	cpu, memory, ephemeral float64
	storage                map[string]float64
}

// SourceQueries are what a report asks of one metrics source: Integral, and, at the instants
// where the source was not up (Up over the UpRange), Held.
type SourceQueries struct{ Integral, Held, Up string }

// Queries are what a report asks the metrics store: for pods (kube-scheduler) and claims
// (kube-state-metrics) range queries over Range, and Labels and Releases at the period's end
// (instant queries).
type Queries struct {
	Pods, Claims     SourceQueries
	Labels, Releases string
	Range, UpRange   promv1.Range
}

// Queries returns the queries Report makes for s over p.
func (e *Engine) Queries(s Scope, p Period) Queries {
	namespaces := make([]string, len(s.Tenants))
	for i, t := range s.Tenants {
		namespaces[i] = t.Namespace
	}
	res, maxGap := e.cfg.Resolution, e.cfg.MaxGap
	source := func(latest latestFunc, job string) SourceQueries {
		return SourceQueries{integral(latest, res, p.Step), heldQuery(latest, job, res, maxGap), upQuery(job, res)}
	}
	// The first grid instant in (Start, End]: the grid is multiples of res since the Unix epoch.
	first := time.UnixMilli((p.Start.UnixMilli()/res.Milliseconds() + 1) * res.Milliseconds())
	return Queries{
		Pods:     source(podRequests(namespaces, e.cfg.SchedulerJob), e.cfg.SchedulerJob),
		Claims:   source(claimCapacities(namespaces, e.cfg.StateMetricsJob), e.cfg.StateMetricsJob),
		Labels:   labelsQuery(namespaces, p.End.Sub(p.Start)+res),
		Releases: releasesQuery(namespaces, e.cfg.StateMetricsJob, p.End.Sub(p.Start)+res),
		Range:    promv1.Range{Start: p.Start.Add(p.Step), End: p.End, Step: p.Step},
		UpRange:  promv1.Range{Start: first, End: p.End, Step: res},
	}
}

// Report computes the usage of s over p. The pods, the claims, the labels and the releases are
// asked concurrently; any failure fails the report.
func (e *Engine) Report(ctx context.Context, s Scope, p Period) (usagev1.Report, error) {
	report := usagev1.Report{Resolution: metav1.Duration{Duration: e.cfg.Resolution}}
	q := e.Queries(s, p)
	var pods, claims model.Matrix
	var labels, releases model.Vector
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { pods, err = e.source(gctx, q.Pods, q); return err })
	g.Go(func() (err error) { claims, err = e.source(gctx, q.Claims, q); return err })
	g.Go(func() (err error) { labels, err = e.vector(gctx, q.Labels, p.End); return err })
	g.Go(func() (err error) { releases, err = e.vector(gctx, q.Releases, p.End); return err })
	if err := g.Wait(); err != nil {
		return report, err
	}
	apps := pastApps(s, releases)
	type object struct{ namespace, pod, claim string }
	release := map[object]string{} // an object's app.kubernetes.io/instance; a label seen set wins
	for _, smp := range labels {
		k := object{string(smp.Metric["namespace"]), string(smp.Metric["pod"]), string(smp.Metric["persistentvolumeclaim"])}
		if release[k] == "" {
			release[k] = string(smp.Metric[labelInstance])
		}
	}
	intervals := int(p.End.Sub(p.Start) / p.Step)
	used := map[key]*sums{}
	for _, series := range append(pods, claims...) {
		ns := string(series.Metric["namespace"])
		obj := object{ns, string(series.Metric["pod"]), string(series.Metric["persistentvolumeclaim"])}
		workload, ok := apps[Release{ns, release[obj]}]
		if !ok {
			workload = usagev1.WorkloadReference{Name: usagev1.Unattributed}
		}
		if s.Workload != nil && workload != *s.Workload {
			continue
		}
		for _, v := range series.Values {
			// An integral's value is at its interval's end, a held value at its instant: both in
			// the interval (start, end].
			d := v.Timestamp.Time().Sub(p.Start)
			i := int((d - 1) / p.Step)
			if d <= 0 || i >= intervals || math.IsNaN(float64(v.Value)) {
				continue
			}
			k := key{ns, workload, i}
			if used[k] == nil {
				used[k] = &sums{storage: map[string]float64{}}
			}
			seconds := float64(v.Value) * e.cfg.Resolution.Seconds()
			switch {
			case obj.claim != "":
				used[k].storage[string(series.Metric["storageclass"])] += seconds
			case series.Metric["resource"] == resourceCPU:
				used[k].cpu += seconds
			case series.Metric["resource"] == resourceMemory:
				used[k].memory += seconds
			case series.Metric["resource"] == resourceEphemeralStorage:
				used[k].ephemeral += seconds
			}
		}
	}
	report.Consumers, report.Total = consumers(s.Tenants, p, used)
	return report, nil
}

// source asks one source's integral and, at the instants where the source was not up, its held
// values. The held values cost most of a report's time when asked over the whole period; they are
// asked only over the spans of instants where up says the source was not up.
func (e *Engine) source(ctx context.Context, sq SourceQueries, q Queries) (model.Matrix, error) {
	m, err := e.matrix(ctx, sq.Integral, q.Range)
	if err != nil {
		return nil, err
	}
	spans, err := e.downSpans(ctx, sq.Up, q.UpRange)
	if err != nil {
		return nil, err
	}
	for _, span := range spans {
		if err := pieces(span, func(r promv1.Range) error {
			held, err := e.matrix(ctx, sq.Held, r)
			m = append(m, held...)
			return err
		}); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// pastApps adds to the live apps of s those the history of HelmReleases names, from each tenant's
// delivery namespace only (elsewhere a HelmRelease names nothing); of two apps for one release,
// the live one wins, then the greater kind and name, so that a report does not depend on order.
func pastApps(s Scope, history model.Vector) map[Release]usagev1.WorkloadReference {
	delivery := map[string]string{}
	for _, t := range s.Tenants {
		delivery[t.Namespace] = t.Delivery
	}
	apps := map[Release]usagev1.WorkloadReference{}
	maps.Copy(apps, s.Apps)
	past := map[Release]usagev1.WorkloadReference{}
	for _, smp := range history {
		m := smp.Metric
		target := string(m["target_namespace"])
		if d := delivery[target]; d == "" || d != string(m["namespace"]) {
			continue
		}
		r := Release{target, string(m["release"])}
		w := usagev1.WorkloadReference{Kind: string(m["app_kind"]), Name: string(m["app_name"])}
		if _, live := apps[r]; !live && cmp.Or(cmp.Compare(w.Kind, past[r].Kind), cmp.Compare(w.Name, past[r].Name)) > 0 {
			past[r] = w
		}
	}
	maps.Copy(apps, past)
	return apps
}

// vector asks an instant query.
func (e *Engine) vector(ctx context.Context, query string, at time.Time) (model.Vector, error) {
	v, _, err := e.api.Query(ctx, query, at)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("%w: the query answered %s, not a vector", ErrUnavailable, v.Type())
	}
	return vec, nil
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

// mergeGap is how many up instants between two spans of down instants merge them into one, so
// that a flapping source costs few queries (the held query is empty where the source was up).
const mergeGap = 60

// downSpans are the spans of the instants of r (a step of the resolution) where the source was not
// known to be up: up was not 1, or nothing was scraped.
func (e *Engine) downSpans(ctx context.Context, up string, r promv1.Range) ([]promv1.Range, error) {
	var spans []promv1.Range
	err := pieces(r, func(piece promv1.Range) error {
		m, err := e.matrix(ctx, up, piece)
		if err != nil {
			return err
		}
		isUp := map[model.Time]bool{}
		for _, series := range m {
			for _, v := range series.Values {
				isUp[v.Timestamp] = isUp[v.Timestamp] || v.Value == 1
			}
		}
		for t := piece.Start; !t.After(piece.End); t = t.Add(piece.Step) {
			switch n := len(spans); {
			case isUp[model.TimeFromUnixNano(t.UnixNano())]:
			case n > 0 && t.Sub(spans[n-1].End) <= mergeGap*piece.Step:
				spans[n-1].End = t
			default:
				spans = append(spans, promv1.Range{Start: t, End: t, Step: piece.Step})
			}
		}
		return nil
	})
	return spans, err
}

// pieces calls f with r cut into ranges of at most maxPoints instants.
func pieces(r promv1.Range, f func(promv1.Range) error) error {
	for start := r.Start; !start.After(r.End); start = start.Add(maxPoints * r.Step) {
		end := start.Add((maxPoints - 1) * r.Step)
		if end.After(r.End) {
			end = r.End
		}
		if err := f(promv1.Range{Start: start, End: end, Step: r.Step}); err != nil {
			return err
		}
	}
	return nil
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
	total := sums{storage: map[string]float64{}}
	out := make([]usagev1.Consumer, 0, len(keys))
	for _, k := range keys {
		u := used[k]
		total.cpu, total.memory, total.ephemeral = total.cpu+u.cpu, total.memory+u.memory, total.ephemeral+u.ephemeral
		for class, v := range u.storage {
			total.storage[class] += v
		}
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
	c := usagev1.Consumptions{
		VCPUHours:                decimal(u.cpu / 3600),
		MemoryGiBHours:           decimal(u.memory / 3600 / gib),
		EphemeralStorageGiBHours: decimal(u.ephemeral / 3600 / gib),
	}
	for _, class := range slices.Sorted(maps.Keys(u.storage)) {
		c.PersistentStorageGiBHours = append(c.PersistentStorageGiBHours,
			usagev1.StorageClassGiBHours{StorageClassName: class, GiBHours: decimal(u.storage[class] / 3600 / gib)})
	}
	return c
}

// decimal writes v as the shortest decimal string that reads back as v.
func decimal(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
