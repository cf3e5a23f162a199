package subnets

import (
	"fmt"
	"hash/fnv"
	"math/big"
	"net/netip"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// MaxBlocks caps the blocks counted in one family: an IPv6 pool cut into /64s holds more blocks
// than any cluster has namespaces, and the count must fit an int64.
const MaxBlocks = int64(1) << 40

// FamilyBlocks is how many blocks r holds, capped at MaxBlocks.
func FamilyBlocks(r *netv1.BlockRange) int64 {
	var n int64
	for _, c := range r.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || int(r.BlockPrefixLength) < p.Bits() {
			continue // refused by the CRD's validation; counted as empty
		}
		bits := int(r.BlockPrefixLength) - p.Bits()
		if bits >= 40 {
			return MaxBlocks
		}
		n += int64(1) << bits
		if n >= MaxBlocks {
			return MaxBlocks
		}
	}
	return n
}

// Blocks is how many tenant blocks the pool holds: block i takes the i-th block of each family the
// pool has, so a dual-stack pool holds as many as its smaller family.
func Blocks(p *netv1.SubnetPool) int64 {
	n := int64(-1)
	for _, r := range []*netv1.BlockRange{p.Spec.IPv4, p.Spec.IPv6} {
		if r == nil {
			continue
		}
		if f := FamilyBlocks(r); n < 0 || f < n {
			n = f
		}
	}
	return max(n, 0)
}

// Block returns the i-th block of r: the CIDRs are taken in order, each cut from its start.
func Block(r *netv1.BlockRange, i int64) (netip.Prefix, error) {
	for _, c := range r.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return netip.Prefix{}, err
		}
		bits := int(r.BlockPrefixLength) - p.Bits()
		if bits < 0 {
			return netip.Prefix{}, fmt.Errorf("block prefix length %d is shorter than %s", r.BlockPrefixLength, c)
		}
		if bits < 63 && i >= int64(1)<<bits {
			i -= int64(1) << bits
			continue
		}
		// base + i << (address bits - block prefix length)
		addr := new(big.Int).SetBytes(p.Addr().AsSlice())
		off := new(big.Int).Lsh(big.NewInt(i), uint(p.Addr().BitLen()-int(r.BlockPrefixLength)))
		raw := addr.Add(addr, off).FillBytes(make([]byte, p.Addr().BitLen()/8))
		a, _ := netip.AddrFromSlice(raw)
		return netip.PrefixFrom(a, int(r.BlockPrefixLength)), nil
	}
	return netip.Prefix{}, fmt.Errorf("block %d is beyond the range", i)
}

// Pick chooses the block for a namespace among n, given those in use: it starts at a place derived
// from the namespace's name and takes the first free block from there. The same view of the pool
// gives the same block, and namespaces created together start at different places, so concurrent
// allocations rarely contend for one block. ok is false when every block is in use.
func Pick(namespace string, n int64, used map[int64]bool) (int64, bool) {
	if n <= 0 || int64(len(used)) >= n {
		return 0, false
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace))
	start := int64(h.Sum64() % uint64(n))
	for k := int64(0); k < n; k++ {
		i := (start + k) % n
		if !used[i] {
			return i, true
		}
	}
	return 0, false
}

// SubnetName is the Kube-OVN Subnet holding block i of pool. The name is the block's claim: the
// API server admits one object of a name, so two allocators cannot both hand out block i.
func SubnetName(pool string, i int64) string { return pool + "-" + strconv.FormatInt(i, 10) }

// BlockIndex reads the block index a Subnet made by this controller records.
func BlockIndex(annotations map[string]string) (int64, bool) {
	i, err := strconv.ParseInt(annotations[netv1.AnnotationBlock], 10, 64)
	return i, err == nil && i >= 0
}

// Selects reports whether pool draws for a namespace with these labels.
func Selects(pool *netv1.SubnetPool, nsLabels map[string]string) (bool, error) {
	if pool.Spec.NamespaceSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NamespaceSelector)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(nsLabels)), nil
}

// ChoosePool returns the pool a namespace draws from: the first by name that selects it and does
// not overlap an older pool; nil when there is none.
func ChoosePool(pools []netv1.SubnetPool, nsLabels map[string]string) *netv1.SubnetPool {
	sorted := slices.Clone(pools)
	slices.SortFunc(sorted, func(a, b netv1.SubnetPool) int { return cmpString(a.Name, b.Name) })
	for i := range sorted {
		p := &sorted[i]
		if !p.DeletionTimestamp.IsZero() || Overlapping(p, pools) != "" {
			continue
		}
		if ok, err := Selects(p, nsLabels); err == nil && ok {
			return p
		}
	}
	return nil
}

// Overlapping names an older pool (by creation, then name) whose ranges overlap p's, or "".
// The older pool keeps its ranges; the younger one hands out nothing.
func Overlapping(p *netv1.SubnetPool, pools []netv1.SubnetPool) string {
	for i := range pools {
		o := &pools[i]
		if o.Name == p.Name || !older(o, p) {
			continue
		}
		if overlap(p.Spec.IPv4, o.Spec.IPv4) || overlap(p.Spec.IPv6, o.Spec.IPv6) {
			return o.Name
		}
	}
	return ""
}

func older(a, b *netv1.SubnetPool) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func overlap(a, b *netv1.BlockRange) bool {
	if a == nil || b == nil {
		return false
	}
	for _, x := range a.CIDRs {
		px, err := netip.ParsePrefix(x)
		if err != nil {
			continue
		}
		for _, y := range b.CIDRs {
			if py, err := netip.ParsePrefix(y); err == nil && px.Overlaps(py) {
				return true
			}
		}
	}
	return false
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
