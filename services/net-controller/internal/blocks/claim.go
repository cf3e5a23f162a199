package blocks

import (
	"context"
	"errors"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/tenants"
)

// ErrBlockTaken: the block chosen was claimed by another allocator between the read and the
// create; the next attempt sees it and picks another. The attempt writes no status: the other
// allocator may be another replica serving this very namespace, whose status is the truth.
var ErrBlockTaken = errors.New("block taken concurrently")

// Holders are the objects holding namespaces' blocks of one kind of pool: the controller's Kube-OVN
// Subnets (of SubnetPools), its MetalLB IPAddressPools (of LoadBalancerPools). H is one holder.
type Holders[H any] interface {
	// Describe names a holder in messages ("Subnet tenants-3").
	Describe(h *H) string
	// Own lists the holders the controller made for a namespace, as r sees them.
	Own(ctx context.Context, r client.Reader, namespace string) ([]H, error)
	// Used are the blocks of a pool held by any holder, the controller's or not.
	Used(ctx context.Context, pool string) (map[int64]bool, error)
	// Read is the allocation a holder of the controller holds.
	Read(ctx context.Context, h *H) (Allocation, error)
	// Release gives back a surplus holder once nothing uses it.
	Release(ctx context.Context, h *H) error
	// Create makes the holder of a new allocation.
	Create(ctx context.Context, a Allocation) error
}

// Verdict is a namespace's block, or why it has none (Allocated=False with Reason and Message;
// Stalled when a human must act).
type Verdict struct {
	Allocation      *Allocation
	Reason, Message string
	Stalled         bool
}

// Unallocated marks obj's Allocated condition False with the verdict's reason, and returns the
// stall to record when a human must act.
func (v Verdict) Unallocated(obj conditions.Setter) *conditions.Stall {
	conditions.MarkFalse(obj, netv1.AllocatedCondition, v.Reason, v.Message)
	if !v.Stalled {
		return nil
	}
	return &conditions.Stall{Reason: v.Reason, Message: v.Message}
}

// Claim finds the block a namespace holds, or allocates one from the pool that selects it. The
// holders are listed from the cache, then, when it shows none, from kube-apiserver (api): the
// cache may not show one created a moment ago. Of several (two allocators raced), the oldest is
// kept and the others released. A new block is the one the namespace held before (prevPool,
// prevHolder: what its report says) when that is free again. poolKind and sizes name the pool
// and the size of one block in messages.
func Claim[T any, P interface {
	*T
	Pool
}, H any, HP interface {
	*H
	metav1.Object
}](ctx context.Context, cache, api client.Reader, holders Holders[H], pools []T, ns *metav1.PartialObjectMetadata,
	prevPool, prevHolder, poolKind string, sizes func(P) string) (Verdict, error) {
	own, err := holders.Own(ctx, cache, ns.Name)
	if err == nil && len(own) == 0 {
		own, err = holders.Own(ctx, api, ns.Name)
	}
	if err != nil {
		return Verdict{}, err
	}
	if len(own) > 0 {
		SortOldest[H, HP](own)
		a, err := holders.Read(ctx, &own[0])
		if err != nil {
			return Verdict{Reason: fmeta.InvalidSpecReason, Stalled: true,
				Message: fmt.Sprintf("%s cannot be read back: %v", holders.Describe(&own[0]), err)}, nil
		}
		for i := 1; i < len(own); i++ {
			if err := holders.Release(ctx, &own[i]); err != nil {
				return Verdict{}, err
			}
		}
		return Verdict{Allocation: &a}, nil
	}
	pool, c, err := Choose[T, P](ctx, pools, ns.Name, ns.Labels, prevPool, prevHolder, holders.Used)
	switch {
	case err != nil:
		return Verdict{}, err
	case pool == nil:
		return Verdict{Reason: netv1.NoPoolReason, Message: fmt.Sprintf("No %s selects namespace %s", poolKind, ns.Name)}, nil
	case c.Unguarded:
		return Verdict{Reason: netv1.PoolNotGuardedReason, Message: fmt.Sprintf(
			"%s %s selects namespace %s; waiting for the net-controller to add its finalizer %s before handing out a block",
			poolKind, pool.GetName(), ns.Name, netv1.Finalizer)}, nil
	case c.Exhausted:
		return Verdict{Reason: netv1.PoolExhaustedReason, Stalled: true, Message: fmt.Sprintf(
			"%s %s is exhausted: %d of %d blocks are held (%s); add CIDRs to the pool or release a namespace",
			poolKind, pool.GetName(), c.Held, c.Blocks, sizes(pool))}, nil
	}
	if err := holders.Create(ctx, c.Allocation); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return Verdict{}, fmt.Errorf("block %d of pool %s: %w", c.Index, pool.GetName(), ErrBlockTaken)
		}
		return Verdict{}, err
	}
	return Verdict{Allocation: &c.Allocation}, nil
}

// Scope is what one reconcile of a namespace's block report (P) learns, shared by its phases.
type Scope[P any] struct {
	Report    P
	Namespace *metav1.PartialObjectMetadata
	// Allocation is the namespace's block, once a phase has found or claimed it.
	Allocation *Allocation
	// Stall is what a phase found a human must fix.
	Stall *conditions.Stall
}

// Phase is one step of a reconcile; a phase that records a stall returns nil.
type Phase[P any] func(ctx context.Context, s *Scope[P]) error

// Reconcile is one reconcile of a namespace's block report (TenantSubnet, TenantAddressPool; T),
// the same for both allocators: a namespace no longer a tenant's goes to release (with its report,
// nil when gone); a tenant namespace without a report gets an empty one (its creation brings the
// namespace back); otherwise the phases run in order until one fails, and w writes the report's
// status once, at the end. A reconcile that lost its block to another allocator writes nothing: it
// is retried at once, and reported by whoever holds the block.
func Reconcile[T any, P interface {
	*T
	tenants.Report
}](ctx context.Context, c client.Client, name string, w status.Writer,
	release func(ctx context.Context, name string, rep P) error, phases ...Phase[P]) (res ctrl.Result, retErr error) {
	ns, rep, err := tenants.Load[T, P](ctx, c, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ns == nil {
		return ctrl.Result{}, release(ctx, name, rep)
	}
	if rep == nil {
		rep = new(T)
		rep.SetName(name)
		rep.SetLabels(maps.Clone(ManagedLabels))
		return ctrl.Result{}, tenants.CreateReport(ctx, c, rep, FieldOwner)
	}
	helper := patch.NewHelper(rep)
	s := &Scope[P]{Report: rep, Namespace: ns}
	defer func() {
		if !errors.Is(retErr, ErrBlockTaken) {
			w.Finish(ctx, helper, rep, s.Stall, &res, &retErr)
		}
	}()
	for _, phase := range phases {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}
