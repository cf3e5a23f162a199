package tenantservice

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

func TestHostedServices(t *testing.T) {
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"hosts etcd and ingress", map[string]string{tenancyv1.LabelTenant: "a", tenancyv1.LabelEtcd: "tenant-a", tenancyv1.LabelIngress: "tenant-a", tenancyv1.LabelMonitoring: "tenant-root"}, []string{"etcd", "ingress"}},
		{"uses its parent's", map[string]string{tenancyv1.LabelTenant: "a", tenancyv1.LabelEtcd: "tenant-root"}, nil},
		{"not a tenant's namespace", map[string]string{tenancyv1.LabelEtcd: "tenant-a"}, nil},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a", Labels: c.labels}}
		if got := hostedServices(ns); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestProviderIsTheFirstServedByName(t *testing.T) {
	def := func(name, service string, ready bool) catalogv1.ApplicationDefinition {
		d := catalogv1.ApplicationDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		d.Spec.TenantService = service
		status := metav1.ConditionFalse
		if ready {
			status = metav1.ConditionTrue
		}
		d.Status.Conditions = []metav1.Condition{{Type: fmeta.ReadyCondition, Status: status}}
		return d
	}
	defs := []catalogv1.ApplicationDefinition{def("zetcds", "etcd", true), def("aetcds", "etcd", false), def("metcds", "etcd", true), def("ingresses", "ingress", true)}
	if p := provider(defs, "etcd"); p == nil || p.Name != "metcds" {
		t.Errorf("etcd from %v, want metcds (aetcds is not served)", p)
	}
	if p := provider(defs, "monitoring"); p != nil {
		t.Errorf("monitoring from %s, which does not provide it", p.Name)
	}
}
