package tenancy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

func createdAt(t *tenancyv1.Tenant, sec int) *tenancyv1.Tenant {
	t.CreationTimestamp = metav1.NewTime(time.Unix(int64(1_800_000_000+sec), 0))
	return t
}

func deleting(t *tenancyv1.Tenant) *tenancyv1.Tenant {
	now := metav1.Now()
	t.DeletionTimestamp = &now
	return t
}

func TestFitQuotaIsFirstComeFirstServed(t *testing.T) {
	parent := tenant("tenant-root", "acme", "cpu", "8")
	a := createdAt(tenant("tenant-acme", "a", "cpu", "5"), 1)
	b := createdAt(tenant("tenant-acme", "b", "cpu", "3"), 2)
	c := createdAt(tenant("tenant-acme", "c", "cpu", "1"), 2) // same second as b: after it by name
	big := createdAt(tenant("tenant-acme", "big", "cpu", "9"), 0)
	for _, tc := range []struct {
		name     string
		t        *tenancyv1.Tenant
		siblings []*tenancyv1.Tenant
		want     string
	}{
		{"first fits", a, []*tenancyv1.Tenant{a, b, c}, ""},
		{"second fits beside the first", b, []*tenancyv1.Tenant{a, b, c}, ""},
		{"third is too late, whatever the list order", c, []*tenancyv1.Tenant{c, b, a},
			"exceeds what parent tenant acme has left: acme caps it at 8, earlier siblings hold 8 (a, b), 0 is available"},
		{"an earlier child that never fits holds nothing", a, []*tenancyv1.Tenant{big, a, b}, ""},
		{"a deleting child still holds its share", c, []*tenancyv1.Tenant{deleting(a.DeepCopy()), b, c}, "earlier siblings hold 8"},
		{"an earlier child comes first", a, []*tenancyv1.Tenant{createdAt(tenant("tenant-acme", "z", "cpu", "8"), 0).DeepCopy(), a}, "earlier siblings hold 8 (z)"},
		{"undeclared", tenant("tenant-acme", "x", "memory", "1"), nil, "spec.resourceQuotas[cpu]: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var siblings []tenancyv1.Tenant
			for _, s := range tc.siblings {
				siblings = append(siblings, *s)
			}
			got := FitQuota(tc.t, parent, siblings).ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("want fit, got %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Fatalf("want %q, got %v", tc.want, got)
			}
		})
	}
}
