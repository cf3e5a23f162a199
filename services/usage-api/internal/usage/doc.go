// Package usage answers UsageReports from a Prometheus-compatible metrics store
// (VictoriaMetrics), with the contract written in the API's package documentation.
//
// # Sources
//
// Pod requests come from kube-scheduler's /metrics/resources endpoint
// (kube_pod_resource_request): it exports each pod's effective requests exactly as the scheduler
// computes them (init containers, sidecars and overhead included) with the node it is bound to,
// and stops exporting a pod once it is terminal or deleted. kube-state-metrics only has
// per-container requests, from which the effective request would have to be recomputed here,
// differently from the scheduler on every rule change. kube-state-metrics does give the pods'
// labels (kube_pod_labels, with app.kubernetes.io/instance allowed), which attribute pods to apps.
//
// # The query
//
// One MetricsQL query per report computes, for every pod and resource, the sum of its values at
// the resolution's grid instants within each interval (a subquery at the resolution):
//
//	sum_over_time((
//	    max by (namespace, pod, resource) (last_over_time(R[res]))
//	  or
//	    (max by (namespace, pod, resource) (last_over_time(R[maxGap]))
//	       unless on() (max(last_over_time(up{job="<scheduler job>"}[res])) == 1))
//	)[step:res])
//
// The first operand is a pod's latest sample in the resolution before the instant: the normal
// case, each sample counted once. The second holds a pod's latest sample for up to maxGap while
// the source is not known to be up (its scrape failed, or nothing scraped it): so a restart of the
// source or of the store neither drops the pods' time nor, once the source is back, counts it
// twice. max by (namespace, pod, resource) merges the same pod seen by two sources. The sum times
// the resolution is resource × seconds.
package usage
