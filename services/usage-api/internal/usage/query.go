package usage

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Metric names and labels of the sources.
const (
	metricRequest        = "kube_pod_resource_request"
	metricPodLabels      = "kube_pod_labels"
	metricClaimInfo      = "kube_persistentvolumeclaim_info"
	metricClaimPhase     = "kube_persistentvolumeclaim_status_phase"
	metricClaimLabels    = "kube_persistentvolumeclaim_labels"
	metricVolumeCapacity = "kube_persistentvolume_capacity_bytes"
	metricAppRelease     = "flotilla_app_release_info"
	labelInstance        = "label_app_kubernetes_io_instance"
)

// Resources the report counts, by the scheduler metric's resource label.
const (
	resourceCPU              = "cpu"
	resourceMemory           = "memory"
	resourceEphemeralStorage = "ephemeral-storage"
)

// namespaceMatcher is a regular expression matching exactly the given namespaces.
func namespaceMatcher(namespaces []string) string {
	quoted := make([]string, len(namespaces))
	for i, ns := range namespaces {
		quoted[i] = regexp.QuoteMeta(ns)
	}
	return strings.Join(quoted, "|")
}

// latestFunc is an object's latest value within a window: a source's instant vector, by
// namespace, object and what it is counted as.
type latestFunc func(d time.Duration) string

// integral is the first query described in the package documentation: the sum of an object's
// latest sample of the resolution before each grid instant in the window before each evaluation.
func integral(latest latestFunc, res, window time.Duration) string {
	return fmt.Sprintf(`sum_over_time((%s)[%s:%s])`, latest(res), duration(window), duration(res))
}

// heldQuery is the second, at an instant: where the source was not known to be up, an object's
// latest sample of the last maxGap where it has none of the resolution before.
func heldQuery(latest latestFunc, job string, res, maxGap time.Duration) string {
	return fmt.Sprintf(`(%s unless %s) unless on() (%s == 1)`, latest(maxGap), latest(res), upQuery(job, res))
}

// upQuery is 1 at the instants where the source was scraped in the resolution before.
func upQuery(job string, res time.Duration) string {
	return fmt.Sprintf(`max(last_over_time(up{job=%q}[%s]))`, job, duration(res))
}

// podRequests is each pod's latest request of each resource, one scheduler's or another's.
func podRequests(namespaces []string, job string) latestFunc {
	sel := fmt.Sprintf(`%s{job=%q, node!="", namespace=~%q, resource=~"%s|%s|%s"}`,
		metricRequest, job, namespaceMatcher(namespaces), resourceCPU, resourceMemory, resourceEphemeralStorage)
	return func(d time.Duration) string {
		return fmt.Sprintf(`max by (namespace, pod, resource) (last_over_time(%s[%s]))`, sel, duration(d))
	}
}

// claimCapacities is each bound claim's capacity, per storage class: the capacity of the volume
// its info names, while its phase is Bound. The volume's side of the join is one series per
// volume (max by), so that the join cannot fail on a volume seen with two claims.
func claimCapacities(namespaces []string, job string) latestFunc {
	ns := namespaceMatcher(namespaces)
	return func(d time.Duration) string {
		w := duration(d)
		info := fmt.Sprintf(`label_replace(max by (namespace, persistentvolumeclaim, storageclass, volumename) `+
			`(last_over_time(%s{job=%q, namespace=~%q, volumename!=""}[%s])), "persistentvolume", "$1", "volumename", "(.+)")`,
			metricClaimInfo, job, ns, w)
		capacity := fmt.Sprintf(`max by (persistentvolume) (last_over_time(%s{job=%q}[%s]))`, metricVolumeCapacity, job, w)
		bound := fmt.Sprintf(`max by (namespace, persistentvolumeclaim) (last_over_time(%s{job=%q, namespace=~%q, phase="Bound"}[%s])) == 1`,
			metricClaimPhase, job, ns, w)
		return fmt.Sprintf(`max by (namespace, persistentvolumeclaim, storageclass) (%s * on (persistentvolume) group_left () %s and on (namespace, persistentvolumeclaim) (%s))`,
			info, capacity, bound)
	}
}

// labelsQuery gives each pod and claim seen in the window its app.kubernetes.io/instance label.
func labelsQuery(namespaces []string, window time.Duration) string {
	return fmt.Sprintf(`max by (namespace, pod, persistentvolumeclaim, %s) (last_over_time({__name__=~"%s|%s", namespace=~%q}[%s]))`,
		labelInstance, metricPodLabels, metricClaimLabels, namespaceMatcher(namespaces), duration(window))
}

// releasesQuery gives each HelmRelease of an app seen in the window, delivering into one of the
// namespaces: the namespace it is stored in, its release and target namespace, its app's kind and
// name (kube-state-metrics' custom resource state, deploy/charts/usage-api/files/kube-state-metrics).
func releasesQuery(namespaces []string, job string, window time.Duration) string {
	return fmt.Sprintf(`max by (namespace, target_namespace, release, app_kind, app_name) (last_over_time(%s{job=%q, target_namespace=~%q, app_kind!="", release!=""}[%s]))`,
		metricAppRelease, job, namespaceMatcher(namespaces), duration(window))
}

// duration writes d in MetricsQL, in milliseconds so that nothing is rounded.
func duration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
