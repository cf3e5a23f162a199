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

// requestQuery is the query described in the package documentation: per namespace, pod and
// resource, the sum of the values at the grid instants in the window before each evaluation.
func requestQuery(namespaces []string, schedulerJob string, res, maxGap, window time.Duration) string {
	sel := fmt.Sprintf(`%s{job=%q, node!="", namespace=~%q, resource=~"%s|%s|%s"}`,
		metricRequest, schedulerJob, namespaceMatcher(namespaces), resourceCPU, resourceMemory, resourceEphemeralStorage)
	return fmt.Sprintf(`sum_over_time((max by (namespace, pod, resource) (last_over_time(%[1]s[%[2]s]))`+
		` or (max by (namespace, pod, resource) (last_over_time(%[1]s[%[3]s]))`+
		` unless on() (max(last_over_time(up{job=%[4]q}[%[2]s])) == 1)))[%[5]s:%[2]s])`,
		sel, duration(res), duration(maxGap), schedulerJob, duration(window))
}

// labelsQuery gives each pod seen in the window its app.kubernetes.io/instance label.
func labelsQuery(namespaces []string, window time.Duration) string {
	return fmt.Sprintf(`max by (namespace, pod, %s) (last_over_time(%s{namespace=~%q}[%s]))`,
		labelInstance, metricPodLabels, namespaceMatcher(namespaces), duration(window))
}

// duration writes d in MetricsQL, in milliseconds so that nothing is rounded.
func duration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
