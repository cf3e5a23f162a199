// Package quantity keeps arithmetic on resource quantities from a tenant cheap.
//
// resource.ParseQuantity accepts any decimal exponent and caps only binary suffixes, so a tenant
// can write "1e1000000000" where a quantity is expected: nine bytes that parse in microseconds.
// Adding, subtracting or comparing such a quantity expands it to a big integer of that many
// digits, which takes minutes and gigabytes, and Value() of it answers 0. Every quantity a tenant
// writes is therefore checked with InRange at admission (Validate names the field) and passed
// through Cap before any arithmetic, so that an object admitted before the check costs nothing.
package quantity

import (
	"maps"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Max is the largest quantity accepted: the largest int64, the cap Kubernetes itself puts on a
// quantity with a binary suffix.
var Max = *resource.NewQuantity(math.MaxInt64, resource.DecimalSI)

// InRange reports whether q lies within ±Max and its decimal exponent within ±18. The exponent
// is read from q's representation and the magnitude from an approximate float, both in
// nanoseconds; only values near Max are compared exactly (cheaply: their exponent is small). The
// exponent matters on its own: comparing even a zero written 0e1000000000 loops once per power of
// ten, and ParseQuantity wraps an exponent beyond an int32 (0e1000000000000 has one of -727379968).
func InRange(q resource.Quantity) bool {
	if e := exponent(q); e > maxExponent || e < -maxExponent {
		return false
	}
	switch f := math.Abs(q.AsApproximateFloat64()); {
	case math.IsNaN(f) || f > 1e19:
		return false
	case f < 9e18:
		return true
	}
	a := q.DeepCopy()
	if a.Sign() < 0 {
		a.Neg()
	}
	return a.Cmp(Max) <= 0
}

// maxExponent bounds a value's decimal exponent: Max is about 9.2e18, and ParseQuantity rounds
// to nanos.
const maxExponent = 18

// exponent is e where q = unscaled × 10^e. q is a copy: AsDec changes only its form.
func exponent(q resource.Quantity) int64 { return -int64(q.AsDec().Scale()) }

// Cap returns q when it is in range; otherwise zero for a zero or a value with an exponent below
// -18, and ±Max for the rest.
func Cap(q resource.Quantity) resource.Quantity {
	if InRange(q) {
		return q
	}
	if q.Sign() == 0 || exponent(q) < -maxExponent {
		return resource.Quantity{Format: resource.DecimalSI}
	}
	c := Max.DeepCopy()
	if q.Sign() < 0 {
		c.Neg()
	}
	return c
}

// CapAll returns rl with every quantity passed through Cap; rl itself when all are in range.
func CapAll[M ~map[K]resource.Quantity, K comparable](rl M) M {
	var out M
	for k, q := range rl {
		if InRange(q) {
			continue
		}
		if out == nil {
			out = maps.Clone(rl)
		}
		out[k] = Cap(q)
	}
	if out == nil {
		return rl
	}
	return out
}

// Validate returns an error naming p when q is not InRange, nil otherwise.
func Validate(p *field.Path, q resource.Quantity) *field.Error {
	if InRange(q) {
		return nil
	}
	return field.Invalid(p, q.String(), "must be between -9223372036854775807 and 9223372036854775807 (the largest int64), with a decimal exponent between -18 and 18")
}
