package policy

import (
	"context"
	"errors"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
)

// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=storagepolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=storagepolicies/status;storagepolicies/finalizers,verbs=get;patch;update
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes;persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Finalizer holds a StoragePolicy until its StorageClass and resource group are gone.
const Finalizer = "storage.flotilla.dev/policy"

// domainConditions are summarised into Ready, in this order.
var domainConditions = []string{
	storagepolicyv1.LinstorReachableCondition,
	storagepolicyv1.ResourceGroupReadyCondition,
	storagepolicyv1.StorageClassReadyCondition,
	storagepolicyv1.PlaceableCondition,
}

// Reconciler reconciles StoragePolicies into LINSTOR resource groups and StorageClasses.
type Reconciler struct {
	client.Client
	// APIReader reads claims and volumes past the cache, in the rare case a StorageClass must
	// change: the controller does not keep every claim of the cluster in memory for it.
	APIReader client.Reader
	LINSTOR   *linstor.Client
	View      *linstor.View
	Recorder  recorder.EventRecorder
	// Retry is how long a policy whose deletion waits for its volumes waits before looking again.
	Retry time.Duration
}

// scope carries what one reconcile learned about a policy.
type scope struct {
	policy *storagepolicyv1.StoragePolicy
	stall  *conditions.Stall
}

// Reconcile brings one StoragePolicy to its desired state and writes its status once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &storagepolicyv1.StoragePolicy{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{policy: p}
	helper := patch.NewHelper(p)
	defer func() {
		if !p.DeletionTimestamp.IsZero() && !containsFinalizer(p) {
			return // gone once the finalizer is removed
		}
		conditions.Summarize(p, domainConditions, s.stall)
		_, err := helper.Status(ctx, r.Client, p)
		retErr = errors.Join(retErr, client.IgnoreNotFound(err))
		if after := conditions.ReadyFlipped(helper.Before().(*storagepolicyv1.StoragePolicy), p); after != nil {
			r.event(p, after.Status == "True", after.Reason, after.Message)
		}
	}()
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if !containsFinalizer(p) {
		if err := patch.AddFinalizer(ctx, r.Client, p, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.reconcileNormal(ctx, s)
}

// reconcileNormal runs the phases in order: the resource group must exist before a StorageClass
// names it, so that no volume is provisioned from a group that is not there.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	for _, phase := range []func(context.Context, *scope) error{
		r.reconcileResourceGroup,
		r.reconcileStorageClass,
		r.reconcileCapacity,
	} {
		if err := phase(ctx, s); err != nil || s.stall != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) event(p *storagepolicyv1.StoragePolicy, ready bool, reason, msg string) {
	if r.Recorder == nil {
		return
	}
	kind := "Normal"
	if !ready {
		kind = "Warning"
	}
	r.Recorder.Eventf(p, nil, kind, reason, "Reconcile", "%s", msg)
}

// SetupWithManager watches StoragePolicies, the StorageClasses they made, and LINSTOR through
// the view (a change of capacity or reachability makes every policy look again).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Retry == 0 {
		r.Retry = time.Minute
	}
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list storagepolicyv1.StoragePolicyList
		if err := r.List(ctx, &list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, p := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return reqs
	})
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[storagepolicyv1.LabelPolicy]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
		}
		// A class of a policy's name that Flotilla did not make may be in the way.
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&storagepolicyv1.StoragePolicy{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&storagev1.StorageClass{}, byLabel).
		WatchesRawSource(source.Channel(r.View.Changed, all)).
		Named("storagepolicy").
		Complete(r)
}
