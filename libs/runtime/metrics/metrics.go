// Package metrics exports what every Flotilla controller reports beside controller-runtime's own
// metrics (reconciles, errors, durations, work queues, API requests): where its objects stand.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
)

// Kind is a kind to count, by its name and a constructor of an empty list of it.
type Kind struct {
	Name string
	List func() client.ObjectList
}

// KindOf is the Kind of list type L, named name: KindOf[v1alpha1.TenantList]("Tenant").
func KindOf[L any, PL interface {
	*L
	client.ObjectList
}](name string) Kind {
	return Kind{Name: name, List: func() client.ObjectList { return PL(new(L)) }}
}

var (
	objectsDesc = prometheus.NewDesc("flotilla_objects",
		"Objects of a kind by the status of a kstatus condition (Ready, Reconciling, Stalled); Unknown counts objects without it.",
		[]string{"kind", "condition", "status"}, nil)
	staleDesc = prometheus.NewDesc("flotilla_objects_stale",
		"Objects of a kind whose status is behind their spec (status.observedGeneration < metadata.generation).",
		[]string{"kind"}, nil)
)

// RegisterStatus registers on controller-runtime's registry (what /metrics serves) a collector
// that counts, at each scrape, the objects of kinds in reader (the manager's cache: no API call)
// by their kstatus conditions:
//
//	flotilla_objects{kind="Tenant",condition="Ready",status="False"} 2
//	flotilla_objects_stale{kind="Tenant"} 0
//
// Alert on Stalled=True, on Ready=False that lasts, and on stale objects that do not catch up.
func RegisterStatus(reader client.Reader, kinds ...Kind) error {
	return ctrlmetrics.Registry.Register(&StatusCollector{Reader: reader, Kinds: kinds})
}

// StatusCollector is the collector RegisterStatus registers.
type StatusCollector struct {
	Reader client.Reader
	Kinds  []Kind
}

// Describe implements prometheus.Collector.
func (c *StatusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- staleDesc
}

// conditions are the kstatus conditions counted.
var conditions = []string{fmeta.ReadyCondition, fmeta.ReconcilingCondition, fmeta.StalledCondition}

// Collect implements prometheus.Collector. A kind that cannot be listed (its cache not synced
// yet) reports nothing rather than zeros.
func (c *StatusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, k := range c.Kinds {
		list := k.List()
		if err := c.Reader.List(ctx, list); err != nil {
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			continue
		}
		counts := map[[2]string]int{}
		for _, cond := range conditions {
			for _, s := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
				counts[[2]string{cond, string(s)}] = 0
			}
		}
		stale := 0
		for _, item := range items {
			o, ok := item.(fmeta.ObjectWithConditions)
			if !ok {
				continue
			}
			for _, cond := range conditions {
				status := metav1.ConditionUnknown
				if found := meta.FindStatusCondition(o.GetConditions(), cond); found != nil {
					status = found.Status
				}
				counts[[2]string{cond, string(status)}]++
			}
			if o.GetObservedGeneration() < o.GetGeneration() {
				stale++
			}
		}
		for key, n := range counts {
			ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(n), k.Name, key[0], key[1])
		}
		ch <- prometheus.MustNewConstMetric(staleDesc, prometheus.GaugeValue, float64(stale), k.Name)
	}
}
