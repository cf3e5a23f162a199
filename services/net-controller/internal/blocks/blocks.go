package blocks

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"

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
func Blocks(p Pool) int64 {
	n := int64(-1)
	v4, v6 := p.Ranges()
	for _, r := range []*netv1.BlockRange{v4, v6} {
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

// FormatIndex is a block index as the annotation records it.
func FormatIndex(i int64) string { return strconv.FormatInt(i, 10) }

// IndexOf is the block of pool that an object named <pool>-<i> claims; ok is false for any other
// name (a claim's name is exactly the pool, a dash and the index in decimal).
func IndexOf(name, pool string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, pool+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(rest, 10, 64)
	return i, err == nil && i >= 0 && strconv.FormatInt(i, 10) == rest
}

// Used are the blocks of pool claimed by objects of these names, whoever made them: an object
// named pool-i that is not the controller's still keeps block i from being handed out.
func Used(names []string, pool string) map[int64]bool {
	used := map[int64]bool{}
	for _, n := range names {
		if i, ok := IndexOf(n, pool); ok {
			used[i] = true
		}
	}
	return used
}

// Previous is the block a namespace held before (the claim named in its status) when it is free
// again: a claim someone else deleted comes back with the same range, so the addresses workloads
// still hold stay valid.
func Previous(prevPool, prevClaim, pool string, n int64, used map[int64]bool) (int64, bool) {
	if prevPool != pool {
		return 0, false
	}
	i, ok := IndexOf(prevClaim, pool)
	if !ok || i >= n || used[i] {
		return 0, false
	}
	return i, true
}

// SortOldest orders claims oldest first (by creation, then name): when two allocators raced for
// one namespace, the first keeps it.
func SortOldest[T any, P interface {
	*T
	metav1.Object
}](claims []T) {
	slices.SortFunc(claims, func(a, b T) int {
		pa, pb := P(&a), P(&b)
		ca, cb := pa.GetCreationTimestamp(), pb.GetCreationTimestamp()
		if c := ca.Compare(cb.Time); c != 0 {
			return c
		}
		return strings.Compare(pa.GetName(), pb.GetName())
	})
}

// BlockIndex reads the block index a Subnet made by this controller records.
func BlockIndex(annotations map[string]string) (int64, bool) {
	i, err := strconv.ParseInt(annotations[netv1.AnnotationBlock], 10, 64)
	return i, err == nil && i >= 0
}

// Selects reports whether pool draws for a namespace with these labels.
func Selects(pool Pool, nsLabels map[string]string) (bool, error) {
	if pool.Selector() == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pool.Selector())
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(nsLabels)), nil
}

// Pool is a platform range tenant namespaces draw blocks from: a SubnetPool or a LoadBalancerPool.
type Pool interface {
	metav1.Object
	Ranges() (ipv4, ipv6 *netv1.BlockRange)
	Selector() *metav1.LabelSelector
}

// ChoosePool returns the pool a namespace draws from: the first by name that selects it and does
// not overlap an older pool; nil when there is none.
func ChoosePool[T any, P interface {
	*T
	Pool
}](pools []T, nsLabels map[string]string) P {
	sorted := make([]P, len(pools))
	for i := range pools {
		sorted[i] = &pools[i]
	}
	slices.SortFunc(sorted, func(a, b P) int { return strings.Compare(a.GetName(), b.GetName()) })
	for _, p := range sorted {
		if p.GetDeletionTimestamp() != nil || Overlapping(p, pools) != "" {
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
func Overlapping[T any, P interface {
	*T
	Pool
}](p P, pools []T) string {
	for i := range pools {
		var o P = &pools[i]
		if o.GetName() == p.GetName() || !older(o, p) {
			continue
		}
		p4, p6 := p.Ranges()
		o4, o6 := o.Ranges()
		if overlap(p4, o4) || overlap(p6, o6) {
			return o.GetName()
		}
	}
	return ""
}

func older(a, b Pool) bool {
	ca, cb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ca.Equal(&cb) {
		return ca.Before(&cb)
	}
	return a.GetName() < b.GetName()
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

// Choice is the block a namespace gets next from the pool that selects it.
type Choice struct {
	Allocation
	// Exhausted: every block of the pool is held (Held of Blocks); Allocation is empty.
	Exhausted bool
	// Unguarded: the pool does not carry the net-controller's finalizer yet, so nothing would keep
	// it while a block of it is held; Allocation is empty until its controller has added it.
	Unguarded    bool
	Held, Blocks int64
}

// Choose picks a namespace's next block: the pool that selects it (nil when none does), and in it
// the block the namespace held before (prevPool, prevClaim: what its report says) when that is free
// again, else Pick's. used lists the blocks of a pool held (by the claims' names).
func Choose[T any, P interface {
	*T
	Pool
}](ctx context.Context, pools []T, ns string, nsLabels map[string]string, prevPool, prevClaim string,
	used func(ctx context.Context, pool string) (map[int64]bool, error)) (P, Choice, error) {
	pool := ChoosePool[T, P](pools, nsLabels)
	if pool == nil {
		return nil, Choice{}, nil
	}
	if !slices.Contains(pool.GetFinalizers(), netv1.Finalizer) {
		return pool, Choice{Unguarded: true}, nil
	}
	held, err := used(ctx, pool.GetName())
	if err != nil {
		return pool, Choice{}, err
	}
	c := Choice{Held: int64(len(held)), Blocks: Blocks(pool)}
	i, ok := Previous(prevPool, prevClaim, pool.GetName(), c.Blocks, held)
	if !ok {
		i, ok = Pick(ns, c.Blocks, held)
	}
	if !ok {
		c.Exhausted = true
		return pool, c, nil
	}
	c.Allocation, err = Allocate(pool, i, ns)
	return pool, c, err
}
