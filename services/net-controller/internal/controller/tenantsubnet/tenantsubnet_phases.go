package tenantsubnet

import (
	"context"
	"errors"
	"fmt"
	"strings"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/subnets"
)

// subnetNameLabel is the label Kube-OVN puts on an IP naming its Subnet.
const subnetNameLabel = "ovn.kubernetes.io/subnet"

// errBlockTaken: the block chosen was claimed by another allocator between the read and the
// create; the next attempt sees it and picks another. The attempt writes no status: the other
// allocator may be another replica serving this very namespace, whose status is the truth.
var errBlockTaken = errors.New("block taken concurrently")

// reconcileAllocation finds the namespace's block, or allocates one.
func (r *Reconciler) reconcileAllocation(ctx context.Context, s *scope) error {
	own, err := r.ownSubnets(ctx, r.Client, s.ns.Name)
	if err != nil {
		return err
	}
	if len(own) == 0 {
		// The cache may not show a Subnet created a moment ago: kube-apiserver decides.
		if own, err = r.ownSubnets(ctx, r.APIReader, s.ns.Name); err != nil {
			return err
		}
	}
	if len(own) > 0 {
		return r.keepFirst(ctx, s, own)
	}
	pools := &netv1.SubnetPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return err
	}
	// The block the namespace held before (its TenantSubnet says which) is taken again when free:
	// a Subnet someone else deleted comes back with the same range.
	pool, c, err := subnets.Choose(ctx, pools.Items, s.ns.Name, s.ns.Labels, s.ts.Status.Pool, s.ts.Status.Subnet, r.usedBlocks)
	switch {
	case err != nil:
		return err
	case pool == nil:
		conditions.MarkFalse(s.ts, netv1.AllocatedCondition, netv1.NoPoolReason,
			fmt.Sprintf("No SubnetPool selects namespace %s", s.ns.Name))
		return nil
	case c.Unguarded:
		conditions.MarkFalse(s.ts, netv1.AllocatedCondition, netv1.PoolNotGuardedReason,
			fmt.Sprintf("SubnetPool %s selects namespace %s; waiting for the net-controller to add its finalizer %s before handing out a block", pool.Name, s.ns.Name, netv1.Finalizer))
		return nil
	case c.Exhausted:
		msg := fmt.Sprintf("SubnetPool %s is exhausted: %d of %d blocks are held%s; add CIDRs to the pool or release a namespace",
			pool.Name, c.Held, c.Blocks, blockSizes(pool))
		conditions.MarkFalse(s.ts, netv1.AllocatedCondition, netv1.PoolExhaustedReason, msg)
		s.stall = &conditions.Stall{Reason: netv1.PoolExhaustedReason, Message: msg}
		return nil
	}
	if err := r.Create(ctx, subnets.Subnet(c.Allocation), client.FieldOwner(subnets.FieldOwner)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("block %d of pool %s: %w", c.Index, pool.Name, errBlockTaken)
		}
		return err
	}
	return r.allocated(s, c.Allocation)
}

// keepFirst keeps the namespace's oldest Subnet. There is more than one only when two allocators
// raced for the namespace; the others are released (once empty).
func (r *Reconciler) keepFirst(ctx context.Context, s *scope, own []kubeovnv1.Subnet) error {
	subnets.SortOldest(own)
	a, err := allocationOf(&own[0])
	if err != nil {
		msg := fmt.Sprintf("Subnet %s cannot be read back: %v", own[0].Name, err)
		conditions.MarkFalse(s.ts, netv1.AllocatedCondition, fmeta.InvalidSpecReason, msg)
		s.stall = &conditions.Stall{Reason: fmeta.InvalidSpecReason, Message: msg}
		return nil
	}
	for i := 1; i < len(own); i++ {
		if _, err := r.release(ctx, &own[i]); err != nil {
			return err
		}
	}
	return r.allocated(s, a)
}

func (r *Reconciler) allocated(s *scope, a subnets.Allocation) error {
	s.alloc = &a
	s.ts.Status.Pool, s.ts.Status.IPv4, s.ts.Status.IPv6 = a.Pool, a.IPv4, a.IPv6
	s.ts.Status.Subnet = subnets.SubnetName(a.Pool, a.Index)
	conditions.MarkTrue(s.ts, netv1.AllocatedCondition, netv1.ReconciledReason,
		fmt.Sprintf("Block %d of SubnetPool %s: %s", a.Index, a.Pool, a.CIDRBlock()))
	return nil
}

// allocationOf reads back the allocation a Subnet of this controller holds.
func allocationOf(sn *kubeovnv1.Subnet) (subnets.Allocation, error) {
	i, ok := subnets.BlockIndex(sn.Annotations)
	if !ok {
		return subnets.Allocation{}, fmt.Errorf("annotation %s is missing or not a number", netv1.AnnotationBlock)
	}
	a := subnets.Allocation{Pool: sn.Labels[netv1.LabelPool], Index: i, Namespace: sn.Labels[netv1.LabelNamespace]}
	for _, c := range strings.Split(sn.Spec.CIDRBlock, ",") {
		switch {
		case strings.Contains(c, ":"):
			a.IPv6 = c
		case c != "":
			a.IPv4 = c
		}
	}
	if a.IPv4 == "" && a.IPv6 == "" {
		return a, fmt.Errorf("spec.cidrBlock is empty")
	}
	return a, nil
}

// reconcileSubnet writes the namespace's Subnet when it differs from what the controller wants.
func (r *Reconciler) reconcileSubnet(ctx context.Context, s *scope) error {
	if s.alloc == nil {
		conditions.MarkFalse(s.ts, netv1.SubnetReadyCondition, "WaitingForBlock", "Waiting for a block")
		return nil
	}
	desired := subnets.Subnet(*s.alloc)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(subnets.SubnetGVK)
	err := r.Get(ctx, types.NamespacedName{Name: desired.GetName()}, live)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err != nil || !subnets.Contains(live.Object, desired.Object) {
		if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired),
			client.FieldOwner(subnets.FieldOwner), client.ForceOwnership); err != nil {
			conditions.MarkFalse(s.ts, netv1.SubnetReadyCondition, "ApplyFailed", err.Error())
			return err
		}
	}
	conditions.MarkTrue(s.ts, netv1.SubnetReadyCondition, netv1.ReconciledReason,
		fmt.Sprintf("Subnet %s binds namespace %s", desired.GetName(), s.ns.Name))
	return nil
}

// ownSubnets lists the Subnets this controller made for a namespace.
func (r *Reconciler) ownSubnets(ctx context.Context, rd client.Reader, ns string) ([]kubeovnv1.Subnet, error) {
	list := &kubeovnv1.SubnetList{}
	sel := client.MatchingLabels(subnets.SubnetLabels(subnets.Allocation{Namespace: ns}))
	delete(sel, netv1.LabelPool)
	if err := rd.List(ctx, list, sel); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// usedBlocks are the blocks of pool held by a Subnet, whoever made it: a Subnet named pool-i that
// is not the controller's still keeps block i from being handed out.
func (r *Reconciler) usedBlocks(ctx context.Context, pool string) (map[int64]bool, error) {
	list := &kubeovnv1.SubnetList{}
	if err := r.List(ctx, list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
	}
	return subnets.Used(names, pool), nil
}

func blockSizes(p *netv1.SubnetPool) string {
	var parts []string
	if p.Spec.IPv4 != nil {
		parts = append(parts, fmt.Sprintf("IPv4 /%d", p.Spec.IPv4.BlockPrefixLength))
	}
	if p.Spec.IPv6 != nil {
		parts = append(parts, fmt.Sprintf("IPv6 /%d", p.Spec.IPv6.BlockPrefixLength))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
