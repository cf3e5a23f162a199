package tenantaddresspool

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=tenantaddresspools,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=tenantaddresspools/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=loadbalancerpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces;services;resourcequotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=metallb.io,resources=ipaddresspools,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// domainConditions are summarised into Ready, in this order.
var domainConditions = []string{netv1.AllocatedCondition, netv1.AddressPoolReadyCondition}

// Reconciler reconciles the TenantAddressPool of one namespace (requests are namespace names).
type Reconciler struct {
	client.Client
	// APIReader reads past the cache: a block is allocated only after kube-apiserver confirms the
	// namespace holds none, and released only after it confirms no Service holds an address of it.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Namespace is MetalLB's namespace, where the IPAddressPools are written.
	Namespace string
}

// scope carries what one reconcile learns about a namespace.
type scope = blocks.Scope[*netv1.TenantAddressPool]

// Reconcile keeps a tenant namespace's block and IPAddressPool, and releases them once the
// namespace is no longer a tenant's. The phases: the block, the quota beside it, its
// IPAddressPool.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := status.Writer{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}
	return blocks.Reconcile(ctx, r.Client, req.Name, w, r.reconcileRelease,
		r.reconcileAllocation, r.reconcileQuota, r.reconcileAddressPool)
}

// SetupWithManager registers the controller. TenantAddressPools, namespaces, the controller's
// IPAddressPools, ResourceQuotas and LoadBalancer Services lead to the namespace they concern; a
// change of LoadBalancerPools to every namespace still waiting for a block.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	byTenantLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if ns := o.GetLabels()[netv1.LabelNamespace]; ns != "" && o.GetNamespace() == r.Namespace {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ns}}}
		}
		return nil
	})
	// A Service matters while it is a load balancer or holds an address, and when it stops (an
	// update is looked at from both sides: one turned into a ClusterIP Service gives its address
	// back).
	loadBalancers := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isLoadBalancer(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return isLoadBalancer(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return isLoadBalancer(e.ObjectOld) || isLoadBalancer(e.ObjectNew) },
		GenericFunc: func(e event.GenericEvent) bool { return isLoadBalancer(e.Object) },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenantaddresspool").
		// Only creations and deletions: the controller is the one writer of its status.
		For(&netv1.TenantAddressPool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, byName, builder.OnlyMetadata).
		Watches(metallb.Meta(metallb.IPAddressPoolGVK), byTenantLabel, builder.OnlyMetadata).
		Watches(&corev1.ResourceQuota{}, byNamespace).
		Watches(&corev1.Service{}, byNamespace, builder.WithPredicates(loadBalancers)).
		Watches(&netv1.LoadBalancerPool{}, handler.EnqueueRequestsFromMapFunc(r.waiting)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(r)
}

// isLoadBalancer: a Service of type LoadBalancer, or one still holding a load-balancer address.
func isLoadBalancer(o client.Object) bool {
	svc, ok := o.(*corev1.Service)
	return ok && (svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) > 0)
}

// waiting lists the tenant namespaces without a block: those a pool change may serve.
func (r *Reconciler) waiting(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &netv1.TenantAddressPoolList{}
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
