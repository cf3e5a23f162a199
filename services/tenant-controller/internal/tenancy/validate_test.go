package tenancy

import (
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	got := OwnQuota(parent, kids, nil)
	if got.Cpu().String() != "4500m" || !got.Memory().IsZero() {
		t.Errorf("own quota = cpu %s memory %s, want 4500m and 0", got.Cpu(), got.Memory())
	}
}

// The provider's object counts cap every count a tenant does not declare; one it declares is its
// own, less its children's shares, as for any other resource.
func TestOwnQuotaAddsObjectCounts(t *testing.T) {
	counts := corev1.ResourceList{"count/configmaps": resource.MustParse("100"), "count/secrets": resource.MustParse("100")}
	parent := tenant("tenant-root", "a", "cpu", "10", "count/secrets", "500")
	kids := []tenancyv1.Tenant{*tenant("tenant-a", "x", "cpu", "3", "count/secrets", "200")}
	got := OwnQuota(parent, kids, counts)
	want := corev1.ResourceList{"cpu": resource.MustParse("7"), "count/configmaps": resource.MustParse("100"), "count/secrets": resource.MustParse("300")}
	if len(got) != len(want) {
		t.Fatalf("own quota = %v, want %v", got, want)
	}
	for name, q := range want {
		if g := got[name]; g.Cmp(q) != 0 {
			t.Errorf("own quota of %s = %s, want %s", name, g.String(), q.String())
		}
	}
	if got := OwnQuota(tenant("tenant-root", "b"), nil, counts); len(got) != 2 {
		t.Errorf("a tenant that declares nothing: own quota = %v, want the two counts", got)
	}
	zero := ZeroQuota(tenant("tenant-a", "x", "cpu", "3"), parent, counts)
	for _, name := range []corev1.ResourceName{"cpu", "count/secrets", "count/configmaps"} {
		if q, ok := zero[name]; !ok || !q.IsZero() {
			t.Errorf("zero quota of %s = %v (set %v), want 0", name, q, ok)
		}
	}
}

// A quantity with a huge exponent parses in microseconds, but adding or comparing it expands it
// to a number of a billion digits. Validation refuses it, naming the field, and the arithmetic
// behind quota decisions treats it as the largest int64: a tenant admitted before the check (or
// with the webhook down) must not stall the webhook or the controller.
func TestHugeQuantitiesAreRefusedAndCapped(t *testing.T) {
	huge := tenant("tenant-root", "a", "cpu", "1e1000000000")
	huge.Spec.LimitRange = &tenancyv1.LimitRangeSpec{
		Default:        corev1.ResourceList{"memory": resource.MustParse("1e1000000000")},
		DefaultRequest: corev1.ResourceList{"memory": resource.MustParse("1Gi")},
	}
	got := Validate(huge).ToAggregate()
	for _, want := range []string{"spec.resourceQuotas[cpu]", "spec.limitRange.default[memory]"} {
		if got == nil || !strings.Contains(got.Error(), want+": Invalid value") {
			t.Errorf("Validate: want an error naming %s, got %v", want, got)
		}
	}
	root := tenant("tenant-root", "root", "cpu", "10")
	if errs := ValidateQuota(huge, []*tenancyv1.Tenant{root}, []tenancyv1.Tenant{*tenant("tenant-root", "b", "cpu", "1e1000000000")}); len(errs) != 1 {
		t.Errorf("ValidateQuota = %v, want one error for cpu", errs)
	}
	if errs := FitQuota(huge, root, nil); len(errs) != 1 {
		t.Errorf("FitQuota = %v, want one error for cpu", errs)
	}
	own := OwnQuota(tenant("tenant-root", "p", "cpu", "1e1000000000"), []tenancyv1.Tenant{*huge}, nil)
	if !own.Cpu().IsZero() {
		t.Errorf("own quota = %s, want 0 (the child takes all of the capped value)", own.Cpu())
	}
	lr := LimitRange("tenant-a", huge)
	if m := (*lr.Spec.Limits[0].Default)["memory"]; m.String() != "9223372036854775807" {
		t.Errorf("LimitRange default memory = %s, want the largest int64", m.String())
	}
}

// slowToParse reports whether ParseQuantity itself takes long over qty's exponent: a negative one
// of a million or more (it rounds to nanos by dividing by a power of ten that large: 1e-10000000
// takes a second), or one beyond an int32, which wraps and may come out negative
// (1e1000000000000). The seed 1e1000000000 is neither: it parses at once, and only arithmetic on it
// is slow.
func slowToParse(qty string) bool {
	m := exponentOf.FindStringSubmatch(qty)
	if m == nil {
		return false
	}
	e, err := strconv.ParseInt(m[2], 10, 64)
	return err != nil || e > math.MaxInt32 || (m[1] == "-" && e >= 1_000_000)
}

var exponentOf = regexp.MustCompile(`[eE]([+-]?)([0-9]+)`)

// FuzzValidate: every tenant is either accepted or rejected with a message naming a field, and
// validation never panics, whatever the names and quantities.
func FuzzValidate(f *testing.F) {
	f.Add("acme", "tenant-root", "cpu", "10", "example.org", "gold")
	f.Add("Bad-Name", "tenant-x", "count/pods", "-1", "", "")
	f.Add("a", "tenant-a-b-c", "requests.nvidia.com/gpu", "1e3", "x..y", "Gold")
	f.Add("acme", "tenant-root", "cpu", "1e1000000000", "", "") // found by the fuzzer: hung before quantities were bounded
	f.Fuzz(func(t *testing.T, name, ns, res, qty, host, class string) {
		if slowToParse(qty) {
			t.Skip("ParseQuantity's own time grows with a negative exponent; kube-apiserver has parsed it before validation runs")
		}
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

func TestParseObjectCounts(t *testing.T) {
	got, err := ParseObjectCounts("count/secrets=100, count/tenants.tenancy.flotilla.dev=20,")
	if n := got["count/tenants.tenancy.flotilla.dev"]; err != nil || len(got) != 2 || n.Value() != 20 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"secrets=100", "count/=1", "count/secrets", "count/secrets=-1", "count/secrets=1.5", "count/secrets=lots"} {
		if _, err := ParseObjectCounts(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestParseNamespaceGrants(t *testing.T) {
	got, err := ParseNamespaceGrants("cluster-controller-tenant-namespaces=flotilla-system/cluster-controller, a:b=ns/sa,")
	want := []NamespaceGrant{
		{ClusterRole: "cluster-controller-tenant-namespaces", ServiceAccount: types.NamespacedName{Namespace: "flotilla-system", Name: "cluster-controller"}},
		{ClusterRole: "a:b", ServiceAccount: types.NamespacedName{Namespace: "ns", Name: "sa"}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"role", "role=sa", "=ns/sa", "role=/sa", "role=ns/", "a/b=ns/sa", "role=Ns/sa", "role=ns/s a"} {
		if _, err := ParseNamespaceGrants(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
