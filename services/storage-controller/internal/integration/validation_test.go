package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// Every field a policy can get wrong is refused at the API, with the field named.
func TestBadPoliciesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*storagepolicyv1.StoragePolicy)
		field  string
	}{
		{"no replicas", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 0 }, "spec.replicas"},
		{"four replicas", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 4 }, "spec.replicas"},
		{"no pools", func(p *storagepolicyv1.StoragePolicy) { p.Spec.StoragePools = nil }, "spec.storagePools"},
		{"pool name", func(p *storagepolicyv1.StoragePolicy) { p.Spec.StoragePools = []string{"ssd;rm -rf"} }, "spec.storagePools[0]"},
		{"duplicate pools", func(p *storagepolicyv1.StoragePolicy) { p.Spec.StoragePools = []string{"ssd", "ssd"} }, "spec.storagePools[1]"},
		{"topology key", func(p *storagepolicyv1.StoragePolicy) { p.Spec.TopologyKey = "zone\nx" }, "spec.topologyKey"},
		{"spread of one replica", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 1 }, "spec.topologyKey"},
		{"auto-diskful of one replica", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 1; p.Spec.TopologyKey = "" }, "spec.autoDiskful"},
		{"auto-diskful seconds", func(p *storagepolicyv1.StoragePolicy) { p.Spec.AutoDiskful.After.Duration = 90 * time.Second }, "spec.autoDiskful.after"},
		{"auto-diskful too soon", func(p *storagepolicyv1.StoragePolicy) { p.Spec.AutoDiskful.After.Duration = 0 }, "spec.autoDiskful.after"},
		{"auto-diskful too late", func(p *storagepolicyv1.StoragePolicy) { p.Spec.AutoDiskful.After.Duration = 200 * time.Hour }, "spec.autoDiskful.after"},
		{"filesystem", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Filesystem = "btrfs" }, "spec.filesystem"},
		{"binding mode", func(p *storagepolicyv1.StoragePolicy) { p.Spec.VolumeBindingMode = "Later" }, "spec.volumeBindingMode"},
		{"long name", func(p *storagepolicyv1.StoragePolicy) { p.Name = strings.Repeat("a", 40) }, "metadata.name"},
		{"dotted name", func(p *storagepolicyv1.StoragePolicy) { p.Name = "a.b" }, "metadata.name"},
		{"selector", func(p *storagepolicyv1.StoragePolicy) {
			p.Spec.NodeSelector = map[string]string{}
			for i := range 17 {
				p.Spec.NodeSelector[strings.Repeat("k", i+1)] = "v"
			}
		}, "spec.nodeSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := replicated("bad")
			p.Spec.AutoDiskful.After = &metav1.Duration{Duration: 10 * time.Minute}
			tc.change(p)
			err := k8s.Create(context.Background(), p)
			if err == nil {
				_ = k8s.Delete(context.Background(), p)
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("the error does not name %s: %v", tc.field, err)
			}
		})
	}
}
