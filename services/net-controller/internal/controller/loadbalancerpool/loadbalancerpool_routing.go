package loadbalancerpool

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// reconcileRouting keeps the RoutingPolicy derived from the pool's routing (lbpool-<pool>): made
// when the pool asks for routing, changed when the pool changes, deleted when it no longer asks.
// One of that name the controller did not make is left alone and reported.
func (r *Reconciler) reconcileRouting(ctx context.Context, s *scope) error {
	desired := metallb.RoutingPolicy(s.pool)
	if desired == nil {
		if err := r.dropRouting(ctx, s.pool.Name); err != nil {
			return err
		}
		conditions.MarkTrue(s.pool, netv1.RoutedCondition, netv1.ReconciledReason, "The pool asks for no routing")
		return nil
	}
	live, err := r.liveRouting(ctx, s.pool.Name)
	if err != nil {
		return err
	}
	if live != nil && !ours(live, s.pool.Name) {
		msg := fmt.Sprintf("RoutingPolicy %s exists and is not the net-controller's: replies from the pool's addresses are not routed; delete it or rename the pool", desired.Name)
		conditions.MarkFalse(s.pool, netv1.RoutedCondition, netv1.NotOwnedReason, msg)
		s.stall = &conditions.Stall{Reason: netv1.NotOwnedReason, Message: msg}
		return nil
	}
	switch {
	case live == nil:
		if err := controllerutil.SetControllerReference(s.pool, desired, r.Scheme()); err != nil {
			return err
		}
		if err := r.Create(ctx, desired, client.FieldOwner(blocks.FieldOwner)); err != nil {
			conditions.MarkFalse(s.pool, netv1.RoutedCondition, "ApplyFailed", err.Error())
			return err
		}
	case !equality.Semantic.DeepEqual(live.Spec, desired.Spec):
		live.Spec = desired.Spec
		if err := r.Update(ctx, live, client.FieldOwner(blocks.FieldOwner)); err != nil {
			conditions.MarkFalse(s.pool, netv1.RoutedCondition, "ApplyFailed", err.Error())
			return err
		}
	}
	conditions.MarkTrue(s.pool, netv1.RoutedCondition, netv1.ReconciledReason,
		fmt.Sprintf("RoutingPolicy %s sends replies from the pool's addresses out of %s (table %d)",
			desired.Name, s.pool.Spec.Routing.Interface, s.pool.Spec.Routing.Table))
	return nil
}

// dropRouting deletes the pool's derived RoutingPolicy, if the controller made it.
func (r *Reconciler) dropRouting(ctx context.Context, pool string) error {
	live, err := r.liveRouting(ctx, pool)
	if err != nil || live == nil || !ours(live, pool) {
		return err
	}
	return client.IgnoreNotFound(r.Delete(ctx, live, client.Preconditions{UID: &live.UID}))
}

func (r *Reconciler) liveRouting(ctx context.Context, pool string) (*netv1.RoutingPolicy, error) {
	live := &netv1.RoutingPolicy{}
	err := r.Get(ctx, types.NamespacedName{Name: metallb.RoutingPolicyName(pool)}, live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

// ours: the policy carries the controller's labels for this pool.
func ours(rp *netv1.RoutingPolicy, pool string) bool {
	return metallb.Owned(rp.Labels) && rp.Labels[netv1.LabelPool] == pool
}
