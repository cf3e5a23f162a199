package blocks

import (
	"net/netip"
	"testing"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// FuzzBlock: whatever a pool holds (the CRD admits only canonical CIDRs and block lengths at least
// as long), two different blocks never overlap and each lies inside one of the pool's CIDRs.
func FuzzBlock(f *testing.F) {
	f.Add("10.0.0.0/16", "10.9.0.0/24", uint8(24), int64(0), int64(256))
	f.Add("fd00::/48", "fd01::/64", uint8(64), int64(5), int64(65536))
	f.Fuzz(func(t *testing.T, a, b string, bits uint8, i, j int64) {
		pa, err1 := netip.ParsePrefix(a)
		pb, err2 := netip.ParsePrefix(b)
		if err1 != nil || err2 != nil || pa != pa.Masked() || pb != pb.Masked() || pa.Overlaps(pb) ||
			pa.Addr().Is4() != pb.Addr().Is4() || int(bits) > pa.Addr().BitLen() || int(bits) < max(pa.Bits(), pb.Bits()) {
			return // refused by the CRD
		}
		r := &netv1.BlockRange{CIDRs: []string{a, b}, BlockPrefixLength: int32(bits)}
		n := FamilyBlocks(r)
		if i < 0 || j < 0 || i >= n || j >= n || i == j {
			return
		}
		x, err := Block(r, i)
		if err != nil {
			t.Fatalf("block %d of %d: %v", i, n, err)
		}
		y, err := Block(r, j)
		if err != nil {
			t.Fatalf("block %d of %d: %v", j, n, err)
		}
		if x.Overlaps(y) {
			t.Fatalf("blocks %d (%s) and %d (%s) overlap", i, x, j, y)
		}
		for _, p := range []netip.Prefix{x, y} {
			if !(pa.Contains(p.Addr()) || pb.Contains(p.Addr())) || p.Bits() != int(bits) {
				t.Fatalf("block %s is not a /%d of %s or %s", p, bits, a, b)
			}
		}
	})
}
