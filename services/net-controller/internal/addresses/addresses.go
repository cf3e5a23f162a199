package addresses

import (
	"fmt"
	"net/netip"
)

// Reserved is how many addresses at the start of the external range are never handed out: the
// network address and the platform's own gateway.
const Reserved = 2

// Range is the platform's external range.
type Range struct {
	Prefix netip.Prefix
}

// Size is how many addresses of the range can be handed out.
func (r Range) Size() int {
	bits := r.Prefix.Addr().BitLen() - r.Prefix.Bits()
	if bits >= 30 {
		return 1<<30 - Reserved - 1
	}
	return 1<<bits - Reserved - 1 // without the broadcast address
}

// Contains reports whether a can be handed out.
func (r Range) Contains(a netip.Addr) bool {
	if !r.Prefix.Contains(a) {
		return false
	}
	first := r.Prefix.Masked().Addr()
	for range Reserved {
		if a == first {
			return false
		}
		first = first.Next()
	}
	return true
}

// Next returns the lowest address of the range not in used, or an error naming the numbers.
func (r Range) Next(used map[netip.Addr]bool) (netip.Addr, error) {
	a := r.Prefix.Masked().Addr()
	for range Reserved {
		a = a.Next()
	}
	for i := 0; i < r.Size(); i++ {
		if !used[a] {
			return a, nil
		}
		a = a.Next()
	}
	return netip.Addr{}, fmt.Errorf("external range %s has no free address: %d of %d are held", r.Prefix, len(used), r.Size())
}
