package main

import (
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/utils/ptr"
)

// Each configuration with a port of its own is created pointing at it: never created pointing at
// the shared port and moved afterwards, which kube-apiserver may not notice.
func TestWebhooksPointAtTheirPortFromCreation(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	file := filepath.Join(filepath.Dir(here), "../../../../deploy/charts/storage-controller/files/manifests.yaml")
	validating, mutating, err := readWebhooks([]string{file + "=20003"})
	if err != nil {
		t.Fatal(err)
	}
	if len(validating) == 0 || len(mutating) == 0 {
		t.Fatalf("want the storage-controller's validating and mutating configurations, got %d and %d", len(validating), len(mutating))
	}
	for _, c := range mutating {
		if c.Name != "storage-controller" {
			t.Errorf("mutating configuration named %q, want it named after its chart", c.Name)
		}
		for _, w := range c.Webhooks {
			if got := ptr.Deref(w.ClientConfig.URL, ""); got != "https://127.0.0.1:20003/mutate-v1-pod" || w.ClientConfig.Service != nil {
				t.Errorf("webhook %s: URL %q, service %v; want https://127.0.0.1:20003/mutate-v1-pod", w.Name, got, w.ClientConfig.Service)
			}
		}
	}
	for _, c := range validating {
		for _, w := range c.Webhooks {
			if got := ptr.Deref(w.ClientConfig.URL, ""); got != "https://127.0.0.1:20003/validate-v1-persistentvolumeclaim" {
				t.Errorf("webhook %s: URL %q", w.Name, got)
			}
		}
	}
}
