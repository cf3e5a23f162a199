package addresses

import (
	"net/netip"
	"testing"
)

func TestNext(t *testing.T) {
	r := Range{Prefix: netip.MustParsePrefix("100.64.0.0/29")}
	if r.Size() != 5 {
		t.Fatalf("Size = %d, want 5 (8 less network, gateway, broadcast)", r.Size())
	}
	used := map[netip.Addr]bool{}
	var got []string
	for range 5 {
		a, err := r.Next(used)
		if err != nil {
			t.Fatal(err)
		}
		used[a] = true
		got = append(got, a.String())
	}
	if got[0] != "100.64.0.2" || got[4] != "100.64.0.6" {
		t.Errorf("handed out %v, want 100.64.0.2 … 100.64.0.6", got)
	}
	if _, err := r.Next(used); err == nil || err.Error() != "external range 100.64.0.0/29 has no free address: 5 of 5 are held" {
		t.Errorf("full range: %v", err)
	}
	if r.Contains(netip.MustParseAddr("100.64.0.1")) || !r.Contains(netip.MustParseAddr("100.64.0.2")) {
		t.Error("Contains must leave out the network address and the gateway")
	}
}
