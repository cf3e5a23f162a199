package subnetpool

import (
	"context"
	"fmt"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/enqueue"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=subnetpools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=subnetpools/status;subnetpools/finalizers,verbs=get;patch;update

// Reconciler reconciles SubnetPools' status.
type Reconciler struct {
	client.Client
	// APIReader reads past the cache: a pool whose blocks the cache shows none of held is let go
	// only once kube-apiserver agrees (the cache may not show a Subnet made moments ago).
	APIReader client.Reader
}

// Reconcile counts the pool's blocks and those held, and checks its ranges against older pools.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &netv1.SubnetPool{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper := patch.NewHelper(p)
	var stall *conditions.Stall
	defer func() {
		status.Writer{Client: r.Client, Domain: []string{netv1.RangesValidCondition}}.Finish(ctx, helper, p, stall, &res, &retErr)
	}()

	pools := &netv1.SubnetPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return ctrl.Result{}, err
	}
	held := &kubeovnv1.SubnetList{}
	if err := r.List(ctx, held, client.MatchingLabels{netv1.LabelPool: p.Name}); err != nil {
		return ctrl.Result{}, err
	}
	p.Status.Blocks, p.Status.Allocated = blocks.Blocks(p), int64(len(held.Items))
	if !p.DeletionTimestamp.IsZero() {
		// The pool's ranges stay visible (an overlapping pool stays refused) until no block of it
		// is held: a live range is never handed out again. The last Subnet's deletion brings the
		// pool back here.
		if len(held.Items) == 0 {
			if err := r.APIReader.List(ctx, held, client.MatchingLabels{netv1.LabelPool: p.Name}); err != nil {
				return ctrl.Result{}, err
			}
		}
		if len(held.Items) > 0 {
			conditions.MarkDeleting(p, fmt.Sprintf("Waiting for %d tenant namespaces to release their blocks", len(held.Items)))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, p, netv1.Finalizer)
	}
	if !controllerutil.ContainsFinalizer(p, netv1.Finalizer) {
		if err := patch.AddFinalizer(ctx, r.Client, p, netv1.Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if older := blocks.Overlapping(p, pools.Items); older != "" {
		msg := fmt.Sprintf("The pool's ranges overlap those of the older SubnetPool %s: it hands out no block; change its CIDRs", older)
		conditions.MarkFalse(p, netv1.RangesValidCondition, netv1.PoolOverlapReason, msg)
		stall = &conditions.Stall{Reason: netv1.PoolOverlapReason, Message: msg}
		return ctrl.Result{}, nil
	}
	conditions.MarkTrue(p, netv1.RangesValidCondition, netv1.ReconciledReason,
		fmt.Sprintf("%d of %d blocks are held", p.Status.Allocated, p.Status.Blocks))
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller: a pool is looked at again when a Subnet of its
// changes, and when any pool changes (overlap is decided among all of them).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	allPools := enqueue.All[netv1.SubnetPoolList](r.Client)
	return ctrl.NewControllerManagedBy(mgr).
		Named("subnetpool").
		For(&netv1.SubnetPool{}).
		Watches(&netv1.SubnetPool{}, allPools).
		Watches(&kubeovnv1.Subnet{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if p := o.GetLabels()[netv1.LabelPool]; p != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p}}}
			}
			return nil
		})).
		Complete(r)
}
