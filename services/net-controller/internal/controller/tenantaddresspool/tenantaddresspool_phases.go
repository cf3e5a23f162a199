package tenantaddresspool

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// reconcileAllocation finds the namespace's block, or allocates one. The ledger is the
// IPAddressPools in MetalLB's namespace: block i of pool p is held by the one named p-i.
func (r *Reconciler) reconcileAllocation(ctx context.Context, s *scope) error {
	pools := &netv1.LoadBalancerPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return err
	}
	// The block the namespace held before is taken again when free: a pool someone else deleted
	// comes back with the same addresses, which Services may still hold.
	v, err := blocks.Claim(ctx, r.Client, r.APIReader, holders{r}, pools.Items, s.Namespace, s.Report.Status.Pool, poolName(s.Report.Status.AddressPool), "LoadBalancerPool", blockSize)
	if err != nil {
		return err
	}
	if v.Allocation == nil {
		s.Stall = v.Unallocated(s.Report)
		return nil
	}
	a := *v.Allocation
	s.Allocation = &a
	s.Report.Status.Pool, s.Report.Status.IPv4, s.Report.Status.IPv6 = a.Pool, a.IPv4, a.IPv6
	s.Report.Status.AddressPool = r.Namespace + "/" + blocks.SubnetName(a.Pool, a.Index)
	conditions.MarkTrue(s.Report, netv1.AllocatedCondition, netv1.ReconciledReason,
		fmt.Sprintf("Block %d of LoadBalancerPool %s: %s", a.Index, a.Pool, a.CIDRBlock()))
	return nil
}

// holders are the controller's IPAddressPools in MetalLB's namespace, each holding one
// namespace's block; only their metadata is listed.
type holders struct{ r *Reconciler }

func (h holders) Describe(m *metav1.PartialObjectMetadata) string {
	return "IPAddressPool " + h.r.Namespace + "/" + m.Name
}

// Own lists the IPAddressPools this controller made for a namespace.
func (h holders) Own(ctx context.Context, rd client.Reader, ns string) ([]metav1.PartialObjectMetadata, error) {
	list := metallb.ListMeta(metallb.IPAddressPoolGVK)
	sel := client.MatchingLabels{netv1.LabelNamespace: ns}
	for k, v := range blocks.ManagedLabels {
		sel[k] = v
	}
	if err := rd.List(ctx, list, client.InNamespace(h.r.Namespace), sel); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Used are the blocks of pool held by an IPAddressPool in MetalLB's namespace, whoever made it.
func (h holders) Used(ctx context.Context, pool string) (map[int64]bool, error) {
	list := metallb.ListMeta(metallb.IPAddressPoolGVK)
	if err := h.r.List(ctx, list, client.InNamespace(h.r.Namespace)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
	}
	return blocks.Used(names, pool), nil
}

// Read reads back the block an IPAddressPool of the controller holds: its labels name the pool
// and namespace, its annotation the block, and the pool's ranges (append-only) the addresses.
func (h holders) Read(ctx context.Context, m *metav1.PartialObjectMetadata) (blocks.Allocation, error) {
	i, ok := blocks.BlockIndex(m.Annotations)
	if !ok {
		return blocks.Allocation{}, fmt.Errorf("annotation %s is missing or not a number", netv1.AnnotationBlock)
	}
	pool := &netv1.LoadBalancerPool{}
	if err := h.r.Get(ctx, types.NamespacedName{Name: m.Labels[netv1.LabelPool]}, pool); err != nil {
		return blocks.Allocation{}, fmt.Errorf("LoadBalancerPool %q: %w", m.Labels[netv1.LabelPool], err)
	}
	if i >= blocks.Blocks(pool) {
		return blocks.Allocation{}, fmt.Errorf("block %d is beyond LoadBalancerPool %s", i, pool.Name)
	}
	return blocks.Allocate(pool, i, m.Labels[netv1.LabelNamespace])
}

func (h holders) Release(ctx context.Context, m *metav1.PartialObjectMetadata) error {
	_, err := h.r.release(ctx, m.Name)
	return err
}

func (h holders) Create(ctx context.Context, a blocks.Allocation) error {
	return h.r.Create(ctx, metallb.AddressPool(a, h.r.Namespace), client.FieldOwner(blocks.FieldOwner))
}

// reconcileQuota records the namespace's services.loadbalancers quota: kube-apiserver enforces
// it; the status shows it beside the block so that a quota larger than the block is visible.
func (r *Reconciler) reconcileQuota(ctx context.Context, s *scope) error {
	quotas := &corev1.ResourceQuotaList{}
	if err := r.List(ctx, quotas, client.InNamespace(s.Namespace.Name)); err != nil {
		return err
	}
	var least *resource.Quantity
	for i := range quotas.Items {
		if q, ok := quotas.Items[i].Spec.Hard[corev1.ResourceServicesLoadBalancers]; ok && (least == nil || q.Cmp(*least) < 0) {
			least = &q
		}
	}
	s.Report.Status.Quota = ""
	if least != nil {
		s.Report.Status.Quota = least.String()
	}
	return nil
}

// reconcileAddressPool writes the namespace's IPAddressPool when it differs from what the
// controller wants (someone changed or deleted it).
func (r *Reconciler) reconcileAddressPool(ctx context.Context, s *scope) error {
	if s.Allocation == nil {
		conditions.MarkFalse(s.Report, netv1.AddressPoolReadyCondition, "WaitingForBlock", "Waiting for a block")
		return nil
	}
	desired := metallb.AddressPool(*s.Allocation, r.Namespace)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(metallb.IPAddressPoolGVK)
	switch err := r.Get(ctx, client.ObjectKeyFromObject(desired), live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return err
	}
	if live != nil && !metallb.Owned(live.GetLabels()) {
		// Someone replaced the controller's pool with one of their own: it is theirs to keep.
		msg := fmt.Sprintf("IPAddressPool %s/%s exists and is not the net-controller's; delete it to get the block back", r.Namespace, desired.GetName())
		conditions.MarkFalse(s.Report, netv1.AddressPoolReadyCondition, netv1.NotOwnedReason, msg)
		s.Stall = &conditions.Stall{Reason: netv1.NotOwnedReason, Message: msg}
		return nil
	}
	if _, err := ssa.ApplyUnstructured(ctx, r.Client, desired, live, blocks.FieldOwner); err != nil {
		conditions.MarkFalse(s.Report, netv1.AddressPoolReadyCondition, "ApplyFailed", err.Error())
		return err
	}
	conditions.MarkTrue(s.Report, netv1.AddressPoolReadyCondition, netv1.ReconciledReason, quotaMessage(s, desired.GetName()))
	return nil
}

// quotaMessage says what the namespace may use: the block's addresses, and how many LoadBalancer
// Services its quota allows.
func quotaMessage(s *scope, name string) string {
	n := s.Allocation.Addresses()
	msg := fmt.Sprintf("IPAddressPool %s serves the Services of namespace %s with %s addresses", name, s.Namespace.Name, n)
	if s.Report.Status.Quota == "" {
		return msg + "; no ResourceQuota caps services.loadbalancers"
	}
	return msg + "; its quota allows " + s.Report.Status.Quota + " LoadBalancer Services"
}

// poolName is the name part of namespace/name.
func poolName(ref string) string {
	_, name, _ := strings.Cut(ref, "/")
	return name
}

// blockSize is how many addresses one block of the pool holds, per family, for messages.
func blockSize(p *netv1.LoadBalancerPool) string {
	a, err := blocks.Allocate(p, 0, "")
	if err != nil {
		return "?"
	}
	return a.Addresses() + " addresses each"
}
