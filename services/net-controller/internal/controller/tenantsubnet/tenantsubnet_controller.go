package tenantsubnet

import (
	"context"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=tenantsubnets,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=tenantsubnets/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=subnetpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubeovn.io,resources=subnets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kubeovn.io,resources=ips,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// domainConditions are summarised into Ready, in this order.
var domainConditions = []string{netv1.AllocatedCondition, netv1.SubnetReadyCondition}

// Reconciler reconciles the TenantSubnet of one namespace (requests are namespace names).
type Reconciler struct {
	client.Client
	// APIReader reads past the cache: an allocation is made only after kube-apiserver confirms
	// the namespace holds none, and a Subnet is released only after it confirms no address in it
	// is held (the cache may not yet show what was made a moment ago).
	APIReader client.Reader
	Recorder  recorder.EventRecorder
}

// scope carries what one reconcile learns about a namespace.
type scope = blocks.Scope[*netv1.TenantSubnet]

// Reconcile keeps a tenant namespace's block and Subnet, and releases them once the namespace is
// no longer a tenant's. The Subnet is written once the block is known.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := status.Writer{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}
	return blocks.Reconcile(ctx, r.Client, req.Name, w, r.reconcileRelease, r.reconcileAllocation, r.reconcileSubnet)
}

// SetupWithManager registers the controller. TenantSubnets, namespaces, the controller's Subnets
// and Kube-OVN's IPs all lead to the namespace they concern; a change of pools to every namespace
// still waiting for a block.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	bySubnetLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if ns := o.GetLabels()[netv1.LabelNamespace]; ns != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ns}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenantsubnet").
		// Only creations and deletions: the controller is the one writer of a TenantSubnet's status.
		For(&netv1.TenantSubnet{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Namespaces and IPs are many and only their metadata is read: the cache keeps no more.
		Watches(&corev1.Namespace{}, byName, builder.OnlyMetadata).
		Watches(&kubeovnv1.Subnet{}, bySubnetLabel).
		Watches(&kubeovnv1.IP{}, handler.EnqueueRequestsFromMapFunc(r.ipToNamespace), builder.OnlyMetadata).
		Watches(&netv1.SubnetPool{}, handler.EnqueueRequestsFromMapFunc(r.waiting)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(r)
}

// ipToNamespace maps a Kube-OVN IP to the namespace whose Subnet holds it (Kube-OVN labels every
// IP with its subnet): a released namespace waits for its last address to go.
func (r *Reconciler) ipToNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[subnetNameLabel]
	sn := &kubeovnv1.Subnet{}
	if name == "" || r.Get(ctx, types.NamespacedName{Name: name}, sn) != nil {
		return nil
	}
	if ns := sn.Labels[netv1.LabelNamespace]; ns != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ns}}}
	}
	return nil
}

// waiting lists the tenant namespaces without a block: those a pool change may serve.
func (r *Reconciler) waiting(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &netv1.TenantSubnetList{}
	if err := r.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if !conditions.IsTrue(&list.Items[i], netv1.AllocatedCondition) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return out
}

// CacheOptions keeps Kube-OVN's Subnets in the cache without their status. Nothing the controller
// decides from the cache reads it: a release reads the Subnet live. And Kube-OVN's address counts
// in it (kube-ovn's BigInt) deep-copy by writing into the cached original (the generated copy is
// shallow first, then BigInt.DeepCopyInto reuses the shared digits), so two reconcilers reading
// the cache at once race on it.
func CacheOptions(o *ctrl.Options) {
	if o.Cache.ByObject == nil {
		o.Cache.ByObject = map[client.Object]cache.ByObject{}
	}
	o.Cache.ByObject[&kubeovnv1.Subnet{}] = cache.ByObject{Transform: func(obj any) (any, error) {
		if sn, ok := obj.(*kubeovnv1.Subnet); ok {
			sn.Status = kubeovnv1.SubnetStatus{}
		}
		return obj, nil
	}}
}
