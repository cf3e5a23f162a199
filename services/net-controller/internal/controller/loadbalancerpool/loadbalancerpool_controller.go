package loadbalancerpool

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/enqueue"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=loadbalancerpools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=loadbalancerpools/status;loadbalancerpools/finalizers,verbs=get;patch;update
// +kubebuilder:rbac:groups=metallb.io,resources=l2advertisements,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=metallb.io,resources=ipaddresspools,verbs=get;list;watch
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=routingpolicies,verbs=get;list;watch;create;update;delete

// Reconciler reconciles LoadBalancerPools.
type Reconciler struct {
	client.Client
	// Namespace is MetalLB's namespace, where the L2Advertisements are written.
	Namespace string
	// APIReader reads past the cache: a pool whose blocks the cache shows none of held is let go
	// only once kube-apiserver agrees (the cache may not show an IPAddressPool made moments ago).
	APIReader client.Reader
}

// scope carries what one reconcile learned about a pool.
type scope struct {
	pool  *netv1.LoadBalancerPool
	held  int
	stall *conditions.Stall
}

// Reconcile counts the pool's blocks and those held, checks its ranges against older pools and
// keeps its L2Advertisement.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &netv1.LoadBalancerPool{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	held, err := r.held(ctx, r.Client, p.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	s := &scope{pool: p, held: held}
	helper := patch.NewHelper(p)
	defer func() {
		domain := []string{netv1.RangesValidCondition, netv1.AdvertisedCondition, netv1.RoutedCondition}
		status.Writer{Client: r.Client, Domain: domain}.Finish(ctx, helper, p, s.stall, &res, &retErr)
	}()
	p.Status.Blocks, p.Status.Allocated = blocks.Blocks(p), int64(held)
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(p, netv1.Finalizer) {
		if err := patch.AddFinalizer(ctx, r.Client, p, netv1.Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.reconcileRanges(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileAdvertisement(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.reconcileRouting(ctx, s)
}

// reconcileRanges refuses a pool whose ranges overlap an older pool's: it hands out nothing.
func (r *Reconciler) reconcileRanges(ctx context.Context, s *scope) error {
	pools := &netv1.LoadBalancerPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return err
	}
	if older := blocks.Overlapping(s.pool, pools.Items); older != "" {
		msg := fmt.Sprintf("The pool's ranges overlap those of the older LoadBalancerPool %s: it hands out no block; change its CIDRs", older)
		conditions.MarkFalse(s.pool, netv1.RangesValidCondition, netv1.PoolOverlapReason, msg)
		s.stall = &conditions.Stall{Reason: netv1.PoolOverlapReason, Message: msg}
		return nil
	}
	conditions.MarkTrue(s.pool, netv1.RangesValidCondition, netv1.ReconciledReason,
		fmt.Sprintf("%d of %d blocks are held", s.pool.Status.Allocated, s.pool.Status.Blocks))
	return nil
}

// reconcileAdvertisement writes the pool's L2Advertisement when it differs from what the
// controller wants; one of that name the controller did not make is left alone and reported.
func (r *Reconciler) reconcileAdvertisement(ctx context.Context, s *scope) error {
	desired := metallb.L2Advertisement(s.pool, r.Namespace)
	live, err := r.liveAdvertisement(ctx, s.pool.Name)
	if err != nil {
		return err
	}
	if live != nil && !metallb.Owned(live.GetLabels()) {
		msg := fmt.Sprintf("L2Advertisement %s/%s exists and is not the net-controller's: the pool's addresses are not announced; rename or delete it", r.Namespace, s.pool.Name)
		conditions.MarkFalse(s.pool, netv1.AdvertisedCondition, netv1.NotOwnedReason, msg)
		s.stall = &conditions.Stall{Reason: netv1.NotOwnedReason, Message: msg}
		return nil
	}
	if _, err := ssa.ApplyUnstructured(ctx, r.Client, desired, live, blocks.FieldOwner); err != nil {
		conditions.MarkFalse(s.pool, netv1.AdvertisedCondition, "ApplyFailed", err.Error())
		return err
	}
	where := "every interface"
	if len(s.pool.Spec.Interfaces) > 0 {
		where = fmt.Sprint(s.pool.Spec.Interfaces)
	}
	conditions.MarkTrue(s.pool, netv1.AdvertisedCondition, netv1.ReconciledReason,
		fmt.Sprintf("L2Advertisement %s/%s announces the tenants' pools on %s", r.Namespace, s.pool.Name, where))
	return nil
}

// reconcileDelete keeps the pool (its ranges stay refused to overlapping pools) until no block of
// it is held, then drops its L2Advertisement and the finalizer. The last IPAddressPool's deletion
// brings the pool back here.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) error {
	if s.held == 0 {
		held, err := r.held(ctx, r.APIReader, s.pool.Name)
		if err != nil {
			return err
		}
		s.held = held
	}
	if s.held > 0 {
		conditions.MarkDeleting(s.pool, fmt.Sprintf("Waiting for %d tenant namespaces to release their blocks", s.held))
		return nil
	}
	if err := r.dropRouting(ctx, s.pool.Name); err != nil {
		return err
	}
	live, err := r.liveAdvertisement(ctx, s.pool.Name)
	if err != nil {
		return err
	}
	if live != nil && metallb.Owned(live.GetLabels()) {
		uid := live.GetUID()
		if err := r.Delete(ctx, live, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return patch.RemoveFinalizer(ctx, r.Client, s.pool, netv1.Finalizer)
}

func (r *Reconciler) liveAdvertisement(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(metallb.L2AdvertisementGVK)
	err := r.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

// held counts, as from reads them, the IPAddressPools the controller made from the pool (in
// MetalLB's namespace).
func (r *Reconciler) held(ctx context.Context, from client.Reader, pool string) (int, error) {
	list := metallb.ListMeta(metallb.IPAddressPoolGVK)
	if err := from.List(ctx, list, client.InNamespace(r.Namespace), client.MatchingLabels(metallb.PoolSelector(pool))); err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// SetupWithManager registers the controller: a pool is looked at again when one of its
// IPAddressPools or its L2Advertisement changes, and when any pool changes (overlap is decided
// among all of them).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	allPools := enqueue.All[netv1.LoadBalancerPoolList](r.Client)
	byPoolLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if p := o.GetLabels()[netv1.LabelPool]; p != "" && o.GetNamespace() == r.Namespace {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p}}}
		}
		return nil
	})
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetNamespace() != r.Namespace {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("loadbalancerpool").
		For(&netv1.LoadBalancerPool{}).
		Owns(&netv1.RoutingPolicy{}).
		Watches(&netv1.LoadBalancerPool{}, allPools).
		Watches(metallb.Meta(metallb.IPAddressPoolGVK), byPoolLabel, builder.OnlyMetadata).
		Watches(metallb.Meta(metallb.L2AdvertisementGVK), byName, builder.OnlyMetadata).
		Complete(r)
}
