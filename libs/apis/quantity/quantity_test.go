package quantity

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Each case out of range would take minutes (or end the process for lack of memory) if InRange or Cap did
// arithmetic on the quantity before bounding it.
func TestInRangeAndCap(t *testing.T) {
	for _, c := range []struct {
		in, capped string
		ok         bool
	}{
		{"0", "0", true},
		{"10", "10", true},
		{"8Ei", "9223372036854775807", true}, // ParseQuantity caps binary suffixes itself
		{"9223372036854775807", "9223372036854775807", true},
		{"-9223372036854775807", "-9223372036854775807", true},
		{"9223372036854775808", "9223372036854775807", false},
		{"9.22e18", "9.22e18", true}, // near Max: the exact comparison decides
		{"9.3e18", "9223372036854775807", false},
		{"-9.3e18", "-9223372036854775807", false},
		{"1e1000000000", "9223372036854775807", false},
		{"-1e1000000000", "-9223372036854775807", false},
		{"1E1000000000", "9223372036854775807", false},
		{"10e18", "9223372036854775807", false},
		{"0.5e19", "5e18", true},
		// Found by the fuzzer: a zero whose comparison loops once per power of ten.
		{"0e1000000000000", "0", false},
		{"0e100000", "0", false},
	} {
		q := resource.MustParse(c.in)
		if got := InRange(q); got != c.ok {
			t.Errorf("InRange(%s) = %v, want %v", c.in, got, c.ok)
		}
		if got := Cap(q); got.Cmp(resource.MustParse(c.capped)) != 0 {
			t.Errorf("Cap(%s) = %s, want %s", c.in, got.String(), c.capped)
		}
		err := Validate(field.NewPath("spec", "size"), q)
		if (err == nil) != c.ok {
			t.Errorf("Validate(%s) = %v", c.in, err)
		}
		if err != nil && err.Field != "spec.size" {
			t.Errorf("Validate(%s) names %q, want spec.size", c.in, err.Field)
		}
	}
}

func TestCapAllNeverChangesItsInput(t *testing.T) {
	type name string
	in := map[name]resource.Quantity{"cpu": resource.MustParse("4"), "memory": resource.MustParse("1Gi")}
	if out := CapAll(in); len(out) != 2 || out["memory"] != in["memory"] {
		t.Fatalf("CapAll(in range) = %v", out)
	}
	in["storage"] = resource.MustParse("1e1000000000")
	out := CapAll(in)
	if s := out["storage"]; s.Cmp(Max) != 0 {
		t.Errorf("storage capped to %s, want %s", s.String(), Max.String())
	}
	if c := out["cpu"]; c.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("cpu = %s, want 4", c.String())
	}
	if s := in["storage"]; s.String() != "1e1000000000" && s.String() != "10e999999999" {
		t.Errorf("CapAll changed its input: storage = %s", s.String())
	}
}
