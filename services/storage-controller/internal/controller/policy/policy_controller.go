package policy

import (
	"context"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/enqueue"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
)

// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=storagepolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=storagepolicies/status;storagepolicies/finalizers,verbs=get;patch;update
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes;persistentvolumeclaims,verbs=get;list;watch
// (The claim webhook's configuration is patched with a chart role limited to it by name.)
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
	// WebhookConfiguration is the ValidatingWebhookConfiguration of the claim webhook, whose
	// match condition the controller keeps naming every policy's StorageClass; empty when the
	// webhook is off.
	WebhookConfiguration string
	Recorder             recorder.EventRecorder
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
		status.Writer{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}.Finish(ctx, helper, p, s.stall, &res, &retErr)
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
// names it, so that no volume is provisioned from a group that is not there; and the claim webhook
// must match the class before it exists, so that no claim of it escapes the capacity check.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	for _, phase := range []func(context.Context, *scope) error{
		r.reconcileResourceGroup,
		r.reconcileAdmission,
		r.reconcileStorageClass,
		r.reconcileCapacity,
	} {
		if err := phase(ctx, s); err != nil || s.stall != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// SetupWithManager watches StoragePolicies, the StorageClasses they made, and LINSTOR through
// the view (a change of capacity or reachability makes every policy look again).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Retry == 0 {
		r.Retry = time.Minute
	}
	all := enqueue.All[storagepolicyv1.StoragePolicyList](r.Client)
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[storagepolicyv1.LabelPolicy]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
		}
		// A class of a policy's name that Flotilla did not make may be in the way.
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		For(&storagepolicyv1.StoragePolicy{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&storagev1.StorageClass{}, byLabel).
		WatchesRawSource(source.Channel(r.View.Changed, all))
	if r.WebhookConfiguration != "" {
		// A chart upgrade resets the match condition to the chart's ("false"): put it back.
		b = b.Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, all, builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.WebhookConfiguration })))
	}
	return b.Named("storagepolicy").Complete(r)
}

// CacheByObject limits the manager's cache of ValidatingWebhookConfigurations to the claim
// webhook's (the chart's role grants no other).
func CacheByObject(webhookConfiguration string) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: fields.OneTermEqualSelector("metadata.name", webhookConfiguration)},
	}
}
