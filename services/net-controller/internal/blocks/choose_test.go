package blocks

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

func TestIndexOfTakesOnlyExactClaimNames(t *testing.T) {
	for name, want := range map[string]int64{"p-0": 0, "p-17": 17, "p-01": -1, "p--1": -1, "p-1a": -1, "q-1": -1, "p-": -1, "pp-1": -1} {
		i, ok := IndexOf(name, "p")
		if got := map[bool]int64{true: i, false: -1}[ok]; got != want {
			t.Errorf("IndexOf(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestChoose(t *testing.T) {
	ctx := context.Background()
	pools := []netv1.LoadBalancerPool{{ObjectMeta: metav1.ObjectMeta{Name: "lb", Finalizers: []string{netv1.Finalizer}}, Spec: netv1.LoadBalancerPoolSpec{
		IPv4: &netv1.BlockRange{CIDRs: []string{"203.0.113.0/30"}, BlockPrefixLength: 31}}}}
	held := func(names ...string) func(context.Context, string) (map[int64]bool, error) {
		return func(_ context.Context, pool string) (map[int64]bool, error) { return Used(names, pool), nil }
	}

	// The block held before comes back when free, whatever the name's pick would be.
	for _, prev := range []string{"lb-0", "lb-1"} {
		p, c, err := Choose(ctx, pools, "tenant-a", nil, "lb", prev, held())
		if err != nil || p == nil || c.Exhausted || SubnetName("lb", c.Index) != prev {
			t.Errorf("previous %s: pool %v, choice %+v, %v", prev, p, c, err)
		}
	}
	// Taken by someone else: the other block.
	_, c, _ := Choose(ctx, pools, "tenant-a", nil, "lb", "lb-0", held("lb-0", "other-1"))
	if c.Exhausted || c.Index != 1 || c.IPv4 != "203.0.113.2/31" {
		t.Errorf("lb-0 taken: %+v, want block 1 (203.0.113.2/31)", c)
	}
	// Every block held: exhausted, with the numbers.
	_, c, _ = Choose(ctx, pools, "tenant-a", nil, "", "", held("lb-0", "lb-1"))
	if !c.Exhausted || c.Held != 2 || c.Blocks != 2 {
		t.Errorf("full pool: %+v, want exhausted 2 of 2", c)
	}
	// A pool its controller has not guarded yet (no finalizer: deleted now, it would go at once)
	// hands out nothing.
	pools[0].Finalizers = nil
	if p, c, err := Choose(ctx, pools, "tenant-a", nil, "", "", held()); p == nil || err != nil || !c.Unguarded || c.Allocation != (Allocation{}) {
		t.Errorf("unguarded pool: pool %v, choice %+v, %v; want the pool, unguarded, no block", p, c, err)
	}
	// No pool selects the namespace.
	pools[0].Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "x"}}
	if p, _, err := Choose(ctx, pools, "tenant-a", map[string]string{"zone": "y"}, "", "", held()); p != nil || err != nil {
		t.Errorf("no pool selects the namespace: got %v, %v", p, err)
	}
}
