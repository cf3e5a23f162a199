package usage

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Metric names and labels of the sources.
const (
	metricRequest   = "kube_pod_resource_request"
	metricPodLabels = "kube_pod_labels"
	labelInstance   = "label_app_kubernetes_io_instance"
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

// requestQuery is the first query described in the package documentation: per namespace, pod
// and resource, the sum of its latest sample of the resolution before each grid instant in the
// window before each evaluation.
func requestQuery(namespaces []string, schedulerJob string, res, window time.Duration) string {
	return fmt.Sprintf(`sum_over_time((%s)[%s:%s])`, latest(namespaces, schedulerJob, res), duration(window), duration(res))
}

// gapQuery is the second: at the instants where the scheduler was not known to be up, a pod's
// latest sample of the last maxGap where it has none of the resolution before.
func gapQuery(namespaces []string, schedulerJob string, res, maxGap, window time.Duration) string {
	return fmt.Sprintf(`sum_over_time(((%s unless %s) unless on() (%s == 1))[%s:%s])`,
		latest(namespaces, schedulerJob, maxGap), latest(namespaces, schedulerJob, res), upQuery(schedulerJob, res),
		duration(window), duration(res))
}

// upQuery is 1 at the instants where the scheduler was scraped in the resolution before.
func upQuery(schedulerJob string, res time.Duration) string {
	return fmt.Sprintf(`max(last_over_time(up{job=%q}[%s]))`, schedulerJob, duration(res))
}

// latest is each pod's latest request of each resource within d, one source's or another's.
func latest(namespaces []string, schedulerJob string, d time.Duration) string {
	sel := fmt.Sprintf(`%s{job=%q, node!="", namespace=~%q, resource=~"%s|%s|%s"}`,
		metricRequest, schedulerJob, namespaceMatcher(namespaces), resourceCPU, resourceMemory, resourceEphemeralStorage)
	return fmt.Sprintf(`max by (namespace, pod, resource) (last_over_time(%s[%s]))`, sel, duration(d))
}

// labelsQuery gives each pod seen in the window its app.kubernetes.io/instance label.
func labelsQuery(namespaces []string, window time.Duration) string {
	return fmt.Sprintf(`max by (namespace, pod, %s) (last_over_time(%s{namespace=~%q}[%s]))`,
		labelInstance, metricPodLabels, namespaceMatcher(namespaces), duration(window))
}

// duration writes d in MetricsQL, in milliseconds so that nothing is rounded.
func duration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
