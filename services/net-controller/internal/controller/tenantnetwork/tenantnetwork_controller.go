package tenantnetwork

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/addresses"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=tenantnetworks,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=tenantnetworks/status;tenantnetworks/finalizers,verbs=get;patch;update

// domainConditions are summarised into Ready, in this order.
var domainConditions = []string{netv1.AddressesReadyCondition, netv1.OVNReadyCondition}

// Northbound is what the reconciler needs of the OVN northbound database (ovn.Programmer).
type Northbound interface {
	Ensure(ctx context.Context, want ovn.Rows) (int, error)
	Remove(ctx context.Context, key string) (int, error)
	OnChange(func(key string))
}

// Reconciler reconciles TenantNetworks.
type Reconciler struct {
	client.Client
	// APIReader reads the other networks' addresses past the cache before one is handed out.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	NB        Northbound
	// External is the platform's external (transit) range addresses are drawn from.
	External addresses.Range
	// PerNamespace caps the external addresses the networks of one namespace hold.
	PerNamespace int
	// Concurrency is how many networks are reconciled at once; their OVN changes share
	// transactions (ovn.Programmer's group commit).
	Concurrency int

	// allocating serialises the handing out of addresses: one allocation at a time reads every
	// network's addresses from kube-apiserver and records its own before the next one reads.
	allocating sync.Mutex
}

// scope carries what one reconcile learned about a network.
type scope struct {
	tn    *netv1.TenantNetwork
	stall *conditions.Stall
	// converged: the network was Ready for this generation when read; rows changed now were
	// changed by someone else.
	converged bool
}

// key is the network's name in OVN's external_ids.
func key(tn *netv1.TenantNetwork) string { return tn.Namespace + "/" + tn.Name }

// Reconcile programs one TenantNetwork into OVN and writes its status once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	tn := &netv1.TenantNetwork{}
	if err := r.Get(ctx, req.NamespacedName, tn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{tn: tn, converged: conditions.IsReady(tn)}
	helper := patch.NewHelper(tn)
	defer r.finishStatus(ctx, helper, s, &res, &retErr)
	if !tn.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(tn, netv1.Finalizer) {
		if err := patch.AddFinalizer(ctx, r.Client, tn, netv1.Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.reconcileAddresses(ctx, s, helper); err != nil || s.stall != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.reconcileOVN(ctx, s)
}

// SetupWithManager registers the controller. Addresses are handed out from the networks' statuses
// one at a time (allocating; leader election keeps replicas from doing it at once); the rest runs
// on Concurrency workers. Changes in the northbound database to the controller's rows come back as
// events.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	events := make(chan event.GenericEvent)
	r.NB.OnChange(func(k string) {
		ns, name, ok := strings.Cut(k, "/")
		if !ok {
			return
		}
		obj := &netv1.TenantNetwork{}
		obj.Namespace, obj.Name = ns, name
		go func() { events <- event.GenericEvent{Object: obj} }() // never block libovsdb's cache
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenantnetwork").
		For(&netv1.TenantNetwork{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)}).
		Complete(r)
}

// network is the network as OVN needs it, from its spec and the addresses in its status.
func network(tn *netv1.TenantNetwork, external addresses.Range) (ovn.Network, error) {
	cidr, err := netip.ParsePrefix(tn.Spec.CIDR)
	if err != nil {
		return ovn.Network{}, err
	}
	n := ovn.Network{Key: key(tn), CIDR: cidr, SNAT: tn.Spec.SNAT}
	if tn.Status.SNATIP != "" {
		a, err := netip.ParseAddr(tn.Status.SNATIP)
		if err != nil {
			return n, err
		}
		n.Transit = netip.PrefixFrom(a, external.Prefix.Bits())
	}
	ext := map[string]string{}
	for _, f := range tn.Status.FloatingIPs {
		ext[f.Name] = f.ExternalIP
	}
	for _, f := range tn.Spec.FloatingIPs {
		e, err1 := netip.ParseAddr(ext[f.Name])
		i, err2 := netip.ParseAddr(f.InternalIP)
		if err := errors.Join(err1, err2); err != nil {
			return n, err
		}
		n.Floating = append(n.Floating, ovn.Floating{External: e, Internal: i})
	}
	return n, nil
}
