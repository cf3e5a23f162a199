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
// Claims come from kube-state-metrics: kube_persistentvolumeclaim_info names a claim's storage
// class and, once bound, its volume; kube_persistentvolume_capacity_bytes is that volume's
// capacity; kube_persistentvolumeclaim_status_phase says whether the claim is Bound; and
// kube_persistentvolumeclaim_labels attributes it (app.kubernetes.io/instance allowed for
// persistentvolumeclaims too). A claim's capacity is read from its volume because
// kube-state-metrics does not export a claim's status.capacity; for a bound claim the two are the
// same. The volume's side of the join is one series per volume, so that a volume seen with two
// claims (re-bound within a window) cannot fail the query.
//
// # The queries
//
// A report asks, for every pod and resource (and every claim, R standing for the join above), the
// sum of its values at the resolution's grid instants within each interval, in two parts, per
// source. The first is a range query with a step of the interval, summing a subquery at the
// resolution:
//
//	sum_over_time((
//	    max by (namespace, pod, resource) (last_over_time(R[res]))
//	)[step:res])
//
// a pod's latest sample of the resolution before each instant: the normal case, each sample
// counted once. The second holds a pod's latest sample for up to maxGap at the instants where it
// has none and its source was not known to be up (its scrape failed, or nothing scraped it), so
// that a restart of the source or of the store neither drops the pods' time nor, once the source
// is back, counts it twice:
//
//	(max by (namespace, pod, resource) (last_over_time(R[maxGap]))
//	    unless max by (namespace, pod, resource) (last_over_time(R[res])))
//	unless on() (max(last_over_time(up{job="<the source's job>"}[res])) == 1)
//
// It counts nothing while the source is up, and costs most of a report's time if asked over the
// whole period; so up is asked first at every instant, and the second query only over the spans
// of instants where the source was not up (spans closer than an hour merged), as range queries
// at the resolution, whose values the engine sums into their intervals. max by (namespace, pod,
// resource) merges the same pod seen by two replicas of its source. A sum times the resolution
// is resource × seconds. The two sources, the labels and the releases are asked concurrently.
package usage
