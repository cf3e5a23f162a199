package tenantsubnet

import (
	"context"
	"fmt"
	"strings"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
)

// subnetNameLabel is the label Kube-OVN puts on an IP naming its Subnet.
const subnetNameLabel = "ovn.kubernetes.io/subnet"

// reconcileAllocation finds the namespace's block, or allocates one.
func (r *Reconciler) reconcileAllocation(ctx context.Context, s *scope) error {
	pools := &netv1.SubnetPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return err
	}
	// The block the namespace held before (its TenantSubnet says which) is taken again when free:
	// a Subnet someone else deleted comes back with the same range.
	v, err := blocks.Claim(ctx, r.Client, r.APIReader, holders{r}, pools.Items, s.Namespace, s.Report.Status.Pool, s.Report.Status.Subnet, "SubnetPool", blockSizes)
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
	s.Report.Status.Subnet = blocks.SubnetName(a.Pool, a.Index)
	conditions.MarkTrue(s.Report, netv1.AllocatedCondition, netv1.ReconciledReason,
		fmt.Sprintf("Block %d of SubnetPool %s: %s", a.Index, a.Pool, a.CIDRBlock()))
	return nil
}

// holders are the controller's Kube-OVN Subnets, each holding one namespace's block.
type holders struct{ r *Reconciler }

func (holders) Describe(sn *kubeovnv1.Subnet) string { return "Subnet " + sn.Name }

// Own lists the Subnets this controller made for a namespace.
func (h holders) Own(ctx context.Context, rd client.Reader, ns string) ([]kubeovnv1.Subnet, error) {
	list := &kubeovnv1.SubnetList{}
	sel := client.MatchingLabels(blocks.SubnetLabels(blocks.Allocation{Namespace: ns}))
	delete(sel, netv1.LabelPool)
	if err := rd.List(ctx, list, sel); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Used are the blocks of pool held by a Subnet, whoever made it: a Subnet named pool-i that is
// not the controller's still keeps block i from being handed out.
func (h holders) Used(ctx context.Context, pool string) (map[int64]bool, error) {
	list := &kubeovnv1.SubnetList{}
	if err := h.r.List(ctx, list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
	}
	return blocks.Used(names, pool), nil
}

func (holders) Read(_ context.Context, sn *kubeovnv1.Subnet) (blocks.Allocation, error) {
	return allocationOf(sn)
}

func (h holders) Release(ctx context.Context, sn *kubeovnv1.Subnet) error {
	_, err := h.r.release(ctx, sn)
	return err
}

func (h holders) Create(ctx context.Context, a blocks.Allocation) error {
	return h.r.Create(ctx, blocks.Subnet(a), client.FieldOwner(blocks.FieldOwner))
}

// allocationOf reads back the allocation a Subnet of this controller holds.
func allocationOf(sn *kubeovnv1.Subnet) (blocks.Allocation, error) {
	i, ok := blocks.BlockIndex(sn.Annotations)
	if !ok {
		return blocks.Allocation{}, fmt.Errorf("annotation %s is missing or not a number", netv1.AnnotationBlock)
	}
	a := blocks.Allocation{Pool: sn.Labels[netv1.LabelPool], Index: i, Namespace: sn.Labels[netv1.LabelNamespace]}
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
	if s.Allocation == nil {
		conditions.MarkFalse(s.Report, netv1.SubnetReadyCondition, "WaitingForBlock", "Waiting for a block")
		return nil
	}
	desired := blocks.Subnet(*s.Allocation)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(blocks.SubnetGVK)
	switch err := r.Get(ctx, types.NamespacedName{Name: desired.GetName()}, live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return err
	}
	if _, err := ssa.ApplyUnstructured(ctx, r.Client, desired, live, blocks.FieldOwner); err != nil {
		conditions.MarkFalse(s.Report, netv1.SubnetReadyCondition, "ApplyFailed", err.Error())
		return err
	}
	conditions.MarkTrue(s.Report, netv1.SubnetReadyCondition, netv1.ReconciledReason,
		fmt.Sprintf("Subnet %s binds namespace %s", desired.GetName(), s.Namespace.Name))
	return nil
}

func blockSizes(p *netv1.SubnetPool) string {
	var parts []string
	if p.Spec.IPv4 != nil {
		parts = append(parts, fmt.Sprintf("IPv4 /%d", p.Spec.IPv4.BlockPrefixLength))
	}
	if p.Spec.IPv6 != nil {
		parts = append(parts, fmt.Sprintf("IPv6 /%d", p.Spec.IPv6.BlockPrefixLength))
	}
	return strings.Join(parts, ", ")
}
