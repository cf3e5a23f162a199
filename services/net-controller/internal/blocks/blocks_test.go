package blocks

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

func pool(name string, v4 []string, v4len int32, v6 []string, v6len int32) *netv1.SubnetPool {
	p := &netv1.SubnetPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if v4 != nil {
		p.Spec.IPv4 = &netv1.BlockRange{CIDRs: v4, BlockPrefixLength: v4len}
	}
	if v6 != nil {
		p.Spec.IPv6 = &netv1.BlockRange{CIDRs: v6, BlockPrefixLength: v6len}
	}
	return p
}

func TestBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool *netv1.SubnetPool
		want int64
	}{
		{"one v4 range", pool("a", []string{"10.0.0.0/16"}, 24, nil, 0), 256},
		{"two v4 ranges", pool("a", []string{"10.0.0.0/23", "10.9.0.0/24"}, 24, nil, 0), 3},
		{"v6 capped", pool("a", nil, 0, []string{"fd00::/8"}, 64), MaxBlocks},
		{"dual takes the smaller family", pool("a", []string{"10.0.0.0/22"}, 24, []string{"fd00::/56"}, 64), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Blocks(tc.pool); got != tc.want {
				t.Errorf("Blocks = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAllocate(t *testing.T) {
	p := pool("a", []string{"10.0.0.0/23", "10.9.0.0/24"}, 24, []string{"fd00:1::/63", "fd00:9::/64"}, 64)
	for i, want := range []Allocation{
		{IPv4: "10.0.0.0/24", IPv6: "fd00:1::/64"},
		{IPv4: "10.0.1.0/24", IPv6: "fd00:1:0:1::/64"},
		{IPv4: "10.9.0.0/24", IPv6: "fd00:9::/64"},
	} {
		got, err := Allocate(p, int64(i), "ns")
		if err != nil {
			t.Fatal(err)
		}
		if got.IPv4 != want.IPv4 || got.IPv6 != want.IPv6 {
			t.Errorf("block %d = %s %s, want %s %s", i, got.IPv4, got.IPv6, want.IPv4, want.IPv6)
		}
	}
	if _, err := Allocate(p, 3, "ns"); err == nil {
		t.Error("block 3 of a 3-block pool was handed out")
	}
	a, _ := Allocate(p, 2, "ns")
	if a.Protocol() != "Dual" || a.CIDRBlock() != "10.9.0.0/24,fd00:9::/64" {
		t.Errorf("Protocol, CIDRBlock = %s, %s", a.Protocol(), a.CIDRBlock())
	}
}

func TestPick(t *testing.T) {
	first, ok := Pick("tenant-acme", 8, nil)
	if !ok {
		t.Fatal("no block in an empty pool")
	}
	if again, _ := Pick("tenant-acme", 8, nil); again != first {
		t.Errorf("Pick is not deterministic: %d then %d", first, again)
	}
	next, ok := Pick("tenant-acme", 8, map[int64]bool{first: true})
	if !ok || next != (first+1)%8 {
		t.Errorf("with %d taken, Pick = %d, %v; want the next block", first, next, ok)
	}
	full := map[int64]bool{}
	for i := int64(0); i < 8; i++ {
		full[i] = true
	}
	if _, ok := Pick("tenant-acme", 8, full); ok {
		t.Error("Pick found a block in a full pool")
	}
}

func TestChoosePool(t *testing.T) {
	old := pool("b-old", []string{"10.0.0.0/16"}, 24, nil, 0)
	old.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	young := pool("a-young", []string{"10.0.128.0/17"}, 24, nil, 0) // overlaps b-old
	young.CreationTimestamp = metav1.NewTime(time.Unix(200, 0))
	picky := pool("0-picky", []string{"10.1.0.0/16"}, 24, nil, 0)
	picky.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "x"}}
	pools := []netv1.SubnetPool{*old, *young, *picky}

	if got := Overlapping(young, pools); got != "b-old" {
		t.Errorf("Overlapping(young) = %q, want b-old", got)
	}
	if got := Overlapping(old, pools); got != "" {
		t.Errorf("Overlapping(old) = %q, want none: the older pool keeps its ranges", got)
	}
	if got := ChoosePool(pools, map[string]string{"zone": "y"}); got == nil || got.Name != "b-old" {
		t.Errorf("ChoosePool = %v, want b-old (a-young overlaps it, 0-picky does not select)", got)
	}
	if got := ChoosePool(pools, map[string]string{"zone": "x"}); got == nil || got.Name != "0-picky" {
		t.Errorf("ChoosePool = %v, want 0-picky", got)
	}
}
