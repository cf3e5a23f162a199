package tenancy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

func tenant(ns, name string, quota ...string) *tenancyv1.Tenant {
	t := &tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := 0; i+1 < len(quota); i += 2 {
		if t.Spec.ResourceQuotas == nil {
			t.Spec.ResourceQuotas = corev1.ResourceList{}
		}
		t.Spec.ResourceQuotas[corev1.ResourceName(quota[i])] = resource.MustParse(quota[i+1])
	}
	return t
}

func TestValidateQuota(t *testing.T) {
	root := tenant("tenant-root", "root", "cpu", "10")
	for _, tc := range []struct {
		name     string
		t        *tenancyv1.Tenant
		siblings []tenancyv1.Tenant
		want     string
	}{
		{"fits", tenant("tenant-root", "a", "cpu", "10"), nil, ""},
		{"fits with siblings", tenant("tenant-root", "a", "cpu", "4"), []tenancyv1.Tenant{*tenant("tenant-root", "b", "cpu", "6")}, ""},
		{"root is not its own sibling", tenant("tenant-root", "a", "cpu", "10"), []tenancyv1.Tenant{*root}, ""},
		{"own old version is not counted", tenant("tenant-root", "a", "cpu", "10"), []tenancyv1.Tenant{*tenant("tenant-root", "a", "cpu", "9")}, ""},
		{"exceeds", tenant("tenant-root", "a", "cpu", "11"), nil, "spec.resourceQuotas[cpu]: Invalid value: \"11\": exceeds what parent tenant root has left"},
		{"exceeds with siblings", tenant("tenant-root", "a", "cpu", "5"), []tenancyv1.Tenant{*tenant("tenant-root", "b", "cpu", "6")}, "siblings reserve 6 (b=6), 4 is available"},
		{"undeclared", tenant("tenant-root", "a", "memory", "1Gi"), nil, "spec.resourceQuotas[cpu]: Required value"},
		{"a deleting sibling still counts", tenant("tenant-root", "a", "cpu", "5"), []tenancyv1.Tenant{*deleting(tenant("tenant-root", "b", "cpu", "6"))}, "4 is available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateQuota(tc.t, []*tenancyv1.Tenant{root}, tc.siblings)
			got := errs.ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("unexpected error: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Fatalf("want %q, got %v", tc.want, got)
			}
		})
	}
}

func TestOwnQuotaSubtractsChildren(t *testing.T) {
	parent := tenant("tenant-root", "a", "cpu", "10", "memory", "1Gi")
	kids := []tenancyv1.Tenant{*tenant("tenant-a", "x", "cpu", "3", "memory", "2Gi"), *tenant("tenant-a", "y", "cpu", "2500m")}
	got := OwnQuota(parent, kids)
	if got.Cpu().String() != "4500m" || !got.Memory().IsZero() {
		t.Errorf("own quota = cpu %s memory %s, want 4500m and 0", got.Cpu(), got.Memory())
	}
}

// FuzzValidate: every tenant is either accepted or rejected with a message naming a field, and
// validation never panics, whatever the names and quantities.
func FuzzValidate(f *testing.F) {
	f.Add("acme", "tenant-root", "cpu", "10", "example.org", "gold")
	f.Add("Bad-Name", "tenant-x", "count/pods", "-1", "", "")
	f.Add("a", "tenant-a-b-c", "requests.nvidia.com/gpu", "1e3", "x..y", "Gold")
	f.Fuzz(func(t *testing.T, name, ns, res, qty, host, class string) {
		tn := &tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		tn.Spec.Host, tn.Spec.SchedulingClass = host, class
		if q, err := resource.ParseQuantity(qty); err == nil {
			tn.Spec.ResourceQuotas = corev1.ResourceList{corev1.ResourceName(res): q}
		}
		errs := Validate(tn)
		for _, e := range errs {
			if e.Field == "" || e.Error() == "" {
				t.Fatalf("error without a field or message: %#v", e)
			}
		}
		parent := tenant("tenant-root", "root", res, "5")
		for _, e := range ValidateWithinParent(tn, []*tenancyv1.Tenant{parent}, []tenancyv1.Tenant{*tn}) {
			if !strings.HasPrefix(e.Field, "spec.") {
				t.Fatalf("error not naming a spec field: %v", e)
			}
		}
		if len(errs) == 0 {
			if _, err := Place(keyOf(tn)); err != nil {
				t.Fatalf("accepted a tenant that cannot be placed: %v", err)
			}
		}
	})
}
