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
// # The queries
//
// A report asks, for every pod and resource, the sum of its values at the resolution's grid
// instants within each interval (subqueries at the resolution), in two parts:
//
//	sum_over_time((
//	    max by (namespace, pod, resource) (last_over_time(R[res]))
//	)[step:res])
//
//	sum_over_time((
//	    (max by (namespace, pod, resource) (last_over_time(R[maxGap]))
//	       unless max by (namespace, pod, resource) (last_over_time(R[res])))
//	    unless on() (max(last_over_time(up{job="<scheduler job>"}[res])) == 1)
//	)[step:res])
//
// The first is a pod's latest sample of the resolution before each instant: the normal case,
// each sample counted once. The second holds a pod's latest sample for up to maxGap at the
// instants where it has none and the source was not known to be up (its scrape failed, or nothing
// scraped it): so a restart of the source or of the store neither drops the pods' time nor, once
// the source is back, counts it twice. It costs most of a report's time and counts nothing while
// the source was up throughout, so it is asked only when up (asked first, at every instant) says
// otherwise. max by (namespace, pod, resource) merges the same pod seen by two sources. The sum
// times the resolution is resource × seconds.
package usage
