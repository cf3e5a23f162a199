package webhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// The chart sends pods to the webhook under the same condition the code names.
func TestChartPodMatchCondition(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "charts", "storage-controller", "templates", "webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{PodMatchCondition, NamespacedPods, AnnotatedPods, storagepolicyv1.LabelNamespaceSchedulingClass} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the chart's pod webhooks do not say %s", want)
		}
	}
}
