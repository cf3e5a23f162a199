package tenantaddresspool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/subnets"
)

// errBlockTaken: the block chosen was claimed by another allocator between the read and the
// create; the next attempt sees it and picks another. The attempt writes no status: the other
// allocator may be another replica serving this very namespace, whose status is the truth.
var errBlockTaken = errors.New("block taken concurrently")

// reconcileAllocation finds the namespace's block, or allocates one. The ledger is the
// IPAddressPools in MetalLB's namespace: block i of pool p is held by the one named p-i.
func (r *Reconciler) reconcileAllocation(ctx context.Context, s *scope) error {
	own, err := r.ownPools(ctx, r.Client, s.ns.Name)
	if err != nil {
		return err
	}
	if len(own) == 0 {
		// The cache may not show a pool created a moment ago: kube-apiserver decides.
		if own, err = r.ownPools(ctx, r.APIReader, s.ns.Name); err != nil {
			return err
		}
	}
	if len(own) > 0 {
		return r.keepFirst(ctx, s, own)
	}
	pools := &netv1.LoadBalancerPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return err
	}
	// The block the namespace held before is taken again when free: a pool someone else deleted
	// comes back with the same addresses, which Services may still hold.
	pool, c, err := subnets.Choose(ctx, pools.Items, s.ns.Name, s.ns.Labels, s.tp.Status.Pool, poolName(s.tp.Status.AddressPool), r.usedBlocks)
	switch {
	case err != nil:
		return err
	case pool == nil:
		conditions.MarkFalse(s.tp, netv1.AllocatedCondition, netv1.NoPoolReason,
			fmt.Sprintf("No LoadBalancerPool selects namespace %s", s.ns.Name))
		return nil
	case c.Unguarded:
		conditions.MarkFalse(s.tp, netv1.AllocatedCondition, netv1.PoolNotGuardedReason,
			fmt.Sprintf("LoadBalancerPool %s selects namespace %s; waiting for the net-controller to add its finalizer %s before handing out a block", pool.Name, s.ns.Name, netv1.Finalizer))
		return nil
	case c.Exhausted:
		msg := fmt.Sprintf("LoadBalancerPool %s is exhausted: %d of %d blocks are held (%s addresses each); add CIDRs to the pool or release a namespace",
			pool.Name, c.Held, c.Blocks, blockSize(pool))
		conditions.MarkFalse(s.tp, netv1.AllocatedCondition, netv1.PoolExhaustedReason, msg)
		s.stall = &conditions.Stall{Reason: netv1.PoolExhaustedReason, Message: msg}
		return nil
	}
	if err := r.Create(ctx, metallb.AddressPool(c.Allocation, r.Namespace), client.FieldOwner(subnets.FieldOwner)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("block %d of pool %s: %w", c.Index, pool.Name, errBlockTaken)
		}
		return err
	}
	r.allocated(s, c.Allocation)
	return nil
}

// keepFirst keeps the namespace's oldest IPAddressPool. There is more than one only when two
// allocators raced for the namespace; the others are released (once no Service holds an address).
func (r *Reconciler) keepFirst(ctx context.Context, s *scope, own []metav1.PartialObjectMetadata) error {
	subnets.SortOldest(own)
	a, err := r.allocationOf(ctx, &own[0])
	if err != nil {
		msg := fmt.Sprintf("IPAddressPool %s/%s cannot be read back: %v", r.Namespace, own[0].Name, err)
		conditions.MarkFalse(s.tp, netv1.AllocatedCondition, fmeta.InvalidSpecReason, msg)
		s.stall = &conditions.Stall{Reason: fmeta.InvalidSpecReason, Message: msg}
		return nil
	}
	for i := 1; i < len(own); i++ {
		if _, err := r.release(ctx, own[i].Name); err != nil {
			return err
		}
	}
	r.allocated(s, a)
	return nil
}

// allocationOf reads back the block an IPAddressPool of the controller holds: its labels name the
// pool and namespace, its annotation the block, and the pool's ranges (append-only) the addresses.
func (r *Reconciler) allocationOf(ctx context.Context, m *metav1.PartialObjectMetadata) (subnets.Allocation, error) {
	i, ok := subnets.BlockIndex(m.Annotations)
	if !ok {
		return subnets.Allocation{}, fmt.Errorf("annotation %s is missing or not a number", netv1.AnnotationBlock)
	}
	pool := &netv1.LoadBalancerPool{}
	if err := r.Get(ctx, types.NamespacedName{Name: m.Labels[netv1.LabelPool]}, pool); err != nil {
		return subnets.Allocation{}, fmt.Errorf("LoadBalancerPool %q: %w", m.Labels[netv1.LabelPool], err)
	}
	if i >= subnets.Blocks(pool) {
		return subnets.Allocation{}, fmt.Errorf("block %d is beyond LoadBalancerPool %s", i, pool.Name)
	}
	return subnets.Allocate(pool, i, m.Labels[netv1.LabelNamespace])
}

func (r *Reconciler) allocated(s *scope, a subnets.Allocation) {
	s.alloc = &a
	s.tp.Status.Pool, s.tp.Status.IPv4, s.tp.Status.IPv6 = a.Pool, a.IPv4, a.IPv6
	s.tp.Status.AddressPool = r.Namespace + "/" + subnets.SubnetName(a.Pool, a.Index)
	conditions.MarkTrue(s.tp, netv1.AllocatedCondition, netv1.ReconciledReason,
		fmt.Sprintf("Block %d of LoadBalancerPool %s: %s", a.Index, a.Pool, a.CIDRBlock()))
}

// reconcileQuota records the namespace's services.loadbalancers quota: kube-apiserver enforces
// it; the status shows it beside the block so that a quota larger than the block is visible.
func (r *Reconciler) reconcileQuota(ctx context.Context, s *scope) error {
	quotas := &corev1.ResourceQuotaList{}
	if err := r.List(ctx, quotas, client.InNamespace(s.ns.Name)); err != nil {
		return err
	}
	var least *resource.Quantity
	for i := range quotas.Items {
		if q, ok := quotas.Items[i].Spec.Hard[corev1.ResourceServicesLoadBalancers]; ok && (least == nil || q.Cmp(*least) < 0) {
			least = &q
		}
	}
	s.tp.Status.Quota = ""
	if least != nil {
		s.tp.Status.Quota = least.String()
	}
	return nil
}

// reconcileAddressPool writes the namespace's IPAddressPool when it differs from what the
// controller wants (someone changed or deleted it).
func (r *Reconciler) reconcileAddressPool(ctx context.Context, s *scope) error {
	if s.alloc == nil {
		conditions.MarkFalse(s.tp, netv1.AddressPoolReadyCondition, "WaitingForBlock", "Waiting for a block")
		return nil
	}
	desired := metallb.AddressPool(*s.alloc, r.Namespace)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(metallb.IPAddressPoolGVK)
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && !metallb.Owned(live.GetLabels()) {
		// Someone replaced the controller's pool with one of their own: it is theirs to keep.
		msg := fmt.Sprintf("IPAddressPool %s/%s exists and is not the net-controller's; delete it to get the block back", r.Namespace, desired.GetName())
		conditions.MarkFalse(s.tp, netv1.AddressPoolReadyCondition, netv1.NotOwnedReason, msg)
		s.stall = &conditions.Stall{Reason: netv1.NotOwnedReason, Message: msg}
		return nil
	}
	if err != nil || !subnets.Contains(live.Object, desired.Object) {
		if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired),
			client.FieldOwner(subnets.FieldOwner), client.ForceOwnership); err != nil {
			conditions.MarkFalse(s.tp, netv1.AddressPoolReadyCondition, "ApplyFailed", err.Error())
			return err
		}
	}
	conditions.MarkTrue(s.tp, netv1.AddressPoolReadyCondition, netv1.ReconciledReason, quotaMessage(s, desired.GetName()))
	return nil
}

// quotaMessage says what the namespace may use: the block's addresses, and how many LoadBalancer
// Services its quota allows.
func quotaMessage(s *scope, name string) string {
	n := s.alloc.Addresses()
	msg := fmt.Sprintf("IPAddressPool %s serves the Services of namespace %s with %s addresses", name, s.ns.Name, n)
	if s.tp.Status.Quota == "" {
		return msg + "; no ResourceQuota caps services.loadbalancers"
	}
	return msg + "; its quota allows " + s.tp.Status.Quota + " LoadBalancer Services"
}

// ownPools lists the IPAddressPools this controller made for a namespace.
func (r *Reconciler) ownPools(ctx context.Context, rd client.Reader, ns string) ([]metav1.PartialObjectMetadata, error) {
	list := metallb.ListMeta(metallb.IPAddressPoolGVK)
	sel := client.MatchingLabels{netv1.LabelNamespace: ns}
	for k, v := range subnets.ManagedLabels {
		sel[k] = v
	}
	if err := rd.List(ctx, list, client.InNamespace(r.Namespace), sel); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// usedBlocks are the blocks of pool held by an IPAddressPool in MetalLB's namespace, whoever made
// it.
func (r *Reconciler) usedBlocks(ctx context.Context, pool string) (map[int64]bool, error) {
	list := metallb.ListMeta(metallb.IPAddressPoolGVK)
	if err := r.List(ctx, list, client.InNamespace(r.Namespace)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
	}
	return subnets.Used(names, pool), nil
}

// poolName is the name part of namespace/name.
func poolName(ref string) string {
	_, name, _ := strings.Cut(ref, "/")
	return name
}

// blockSize is how many addresses one block of the pool holds, per family.
func blockSize(p *netv1.LoadBalancerPool) string {
	a, err := subnets.Allocate(p, 0, "")
	if err != nil {
		return "?"
	}
	return a.Addresses()
}
