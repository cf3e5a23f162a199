package tenant

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/intern"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// +kubebuilder:rbac:groups=tenancy.flotilla.dev,resources=tenants,verbs=get;list;watch;delete;patch
// +kubebuilder:rbac:groups=tenancy.flotilla.dev,resources=tenants/status;tenants/finalizers,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=resourcequotas;limitranges,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=flotilla:tenant:view;flotilla:tenant:use;flotilla:tenant:admin;flotilla:tenant:super-admin;flotilla:tenant:delivery;flotilla:tenant:delivery-storage
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=list;delete

// domainConditions are summarised into Ready, in this order.
var domainConditions = []string{
	tenancyv1.NamespaceReadyCondition,
	tenancyv1.AccessReadyCondition,
	tenancyv1.QuotaReadyCondition,
	tenancyv1.NetworkPolicyReadyCondition,
	tenancyv1.DeliveryReadyCondition,
}

// Reconciler reconciles Tenants.
type Reconciler struct {
	client.Client
	// APIReader reads past the cache, for namespaces the cache does not hold.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// GroupPrefix is put before the default OIDC group names (<namespace>-<role>).
	GroupPrefix string
	// ObjectCounts caps, in every tenant namespace but the root tenant's, each object count it
	// names (count/<resource>.<group>) that the tenant does not declare: the provider's defaults,
	// so that no tenant can fill etcd with objects of a kind nobody thought to cap.
	ObjectCounts corev1.ResourceList
	// NamespaceGrants bind platform components' ClusterRoles in every tenant namespace.
	NamespaceGrants []tenancy.NamespaceGrant
}

// objectCounts is ObjectCounts for the tenant s reconciles: none for the root, the provider's own.
func (r *Reconciler) objectCounts(s *scope) corev1.ResourceList {
	if s.parent() == nil {
		return nil
	}
	return r.ObjectCounts
}

// scope carries what one reconcile learned about a tenant.
type scope struct {
	tenant    *tenancyv1.Tenant
	placement tenancy.Placement
	chain     []*tenancyv1.Tenant // ancestors, root first, then the tenant
	children  []tenancyv1.Tenant
	siblings  []tenancyv1.Tenant // the tenants in the tenant's own namespace, itself included
	stall     *conditions.Stall
	// deciding: the namespace waits for the quota decision (see settling).
	deciding bool
	// fenced and isolated: the ResourceQuota and the network policies were written in this
	// reconcile; role bindings wait for both.
	fenced, isolated bool
	// delivery is the delivery namespace as read while the tenant namespace was being decided
	// (one round trip less on the way to Ready), or nil.
	delivery *namespaceRead
}

// namespaceRead is the outcome of readNamespace.
type namespaceRead struct {
	ns    *corev1.Namespace
	found bool
	err   error
}

func (s *scope) ancestors() []*tenancyv1.Tenant { return s.chain[:len(s.chain)-1] }

// Reconcile brings one Tenant to its desired state and writes its status once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	t := &tenancyv1.Tenant{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{tenant: t}
	helper := patch.NewHelper(t)
	// The one place a Tenant's status is written: only if something changed and the tenant is
	// unchanged since it was read; one Event when Ready is first True and whenever it flips.
	defer func() {
		status.Writer{Client: r.Client, Recorder: r.Recorder, Domain: domainConditions}.Finish(ctx, helper, t, s.stall, &res, &retErr)
	}()

	if !t.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(t, tenancyv1.Finalizer) {
		if err := patch.AddFinalizer(ctx, r.Client, t, tenancyv1.Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.reconcileNormal(ctx, s)
}

// reconcileNormal runs the phases; each owns one condition. Errors are aggregated; when there is
// none, the shortest requeue wins.
//
// What must come before what, and why (everything else is written concurrently):
//   - the namespace first: everything else lives in it, and a tenant whose quota does not fit its
//     parent's gets none (holdNewNamespace);
//   - the ResourceQuota and LimitRange, and the network policies, before the role bindings: no
//     tenant user, nor the delivery identity, may create anything in a new namespace before its
//     quota and isolation are there. Quota and policies do not depend on each other;
//   - the delivery namespace and its binding grant nothing in the tenant namespace (the apps'
//     identities' binding there is written with the other bindings), so they are written
//     alongside;
//   - Ready is announced only by the status write at the end, after every phase succeeded.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	if done, err := r.loadTree(ctx, s); done || err != nil {
		return ctrl.Result{}, err
	}
	// The delivery namespace is only read here, not written: its phase still waits for the tenant
	// namespace. Not while a new tenant waits for its quota decision: that reconcile goes no further.
	var read chan namespaceRead
	if settleWait(s) <= 0 {
		read = make(chan namespaceRead, 1)
		go func() {
			ns, found, err := r.readNamespace(ctx, tenancyv1.DeliveryNamespace(s.placement.Namespace))
			read <- namespaceRead{ns, found, err}
		}()
	}
	res, err := r.reconcileNamespace(ctx, s)
	if read != nil {
		d := <-read
		s.delivery = &d
	}
	fenceThenGrant := func(ctx context.Context, s *scope) (ctrl.Result, error) {
		res, err := concurrently(ctx, s,
			phase{[]string{tenancyv1.QuotaReadyCondition}, r.reconcileQuota},
			phase{[]string{tenancyv1.NetworkPolicyReadyCondition}, r.reconcileNetworkPolicies})
		ares, aerr := r.reconcileAccess(ctx, s)
		return lowestRequeue(res, ares), errors.Join(err, aerr)
	}
	rest, rerr := concurrently(ctx, s,
		phase{[]string{tenancyv1.QuotaReadyCondition, tenancyv1.NetworkPolicyReadyCondition, tenancyv1.AccessReadyCondition}, fenceThenGrant},
		phase{[]string{tenancyv1.DeliveryReadyCondition}, r.reconcileDelivery})
	if err := errors.Join(err, rerr); err != nil {
		return ctrl.Result{}, err // controller-runtime ignores a RequeueAfter returned with an error
	}
	return lowestRequeue(res, rest), nil
}

func lowestRequeue(a, b ctrl.Result) ctrl.Result {
	if b.RequeueAfter > 0 && (a.RequeueAfter == 0 || b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}

// CacheOptions limits the manager's cache to what this controller reads, in the form it reads it:
// the namespaces, RoleBindings, quotas, limit ranges and network policies it wrote, instead of
// every one in the cluster, and the delivery ServiceAccounts earlier versions wrote, which it
// removes (cacheByObject); of each object's managedFields, only its own applied fields; and what
// many objects hold equal (their labels, their field sets), once for all of them (intern).
func CacheOptions() cache.Options {
	trim, share := ssa.TrimManagedFields(tenancy.FieldOwner), intern.Transform()
	return cache.Options{ByObject: cacheByObject(), DefaultTransform: func(obj any) (any, error) {
		obj, err := trim(obj)
		if err != nil {
			return nil, err
		}
		return share(obj)
	}}
}

// cacheByObject selects, by their labels, the objects of each kind this controller wrote.
func cacheByObject() map[client.Object]cache.ByObject {
	mine := cache.ByObject{Label: labels.SelectorFromSet(tenancy.ManagedLabels)}
	return map[client.Object]cache.ByObject{
		// Its own namespaces (the tenants' and their delivery namespaces); any other is read
		// from kube-apiserver when a tenant's name is taken (readNamespace).
		&corev1.Namespace{}:           mine,
		&rbacv1.RoleBinding{}:         mine,
		&corev1.ResourceQuota{}:       mine,
		&corev1.LimitRange{}:          mine,
		&networkingv1.NetworkPolicy{}: mine,
		&corev1.ServiceAccount{}:      mine,
	}
}

// ancestorIndex indexes Tenants by the namespaces of all their ancestors, so that a tenant's
// descendants are one indexed lookup instead of a scan of every tenant.
const ancestorIndex = "tenancy.flotilla.dev/ancestor"

// SetupWithManager watches Tenants, the tenant namespaces and the objects written into them.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, concurrency int) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &tenancyv1.Tenant{}, ancestorIndex, func(o client.Object) []string {
		p, err := tenancy.Place(client.ObjectKeyFromObject(o))
		if err != nil {
			return nil
		}
		return p.Ancestors
	}); err != nil {
		return err
	}
	toOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ns := o.GetNamespace()
		if ns == "" { // a Namespace
			ns = o.GetName()
		}
		if _, ok := tenancy.OwnerOf(ns); !ok { // a delivery namespace, or an object in one
			ns = tenancyv1.DeliveredNamespace(ns)
		}
		if owner, ok := tenancy.OwnerOf(ns); ok {
			return []reconcile.Request{{NamespacedName: owner}}
		}
		return nil
	})
	// Our own status writes and the creation of our own children are not news: the reconcile that
	// caused them already acted. Changes by others to what we wrote, and deletions, are.
	children := builder.WithPredicates(notCreate{})
	return ctrl.NewControllerManagedBy(mgr).
		For(&tenancyv1.Tenant{}, builder.WithPredicates(treeChanged{})).
		Watches(&tenancyv1.Tenant{}, r.relativesHandler(), builder.WithPredicates(treeChanged{})).
		Watches(&corev1.Namespace{}, toOwner, children).
		Watches(&rbacv1.RoleBinding{}, toOwner, children).
		Watches(&corev1.ResourceQuota{}, toOwner, children).
		Watches(&corev1.LimitRange{}, toOwner, children).
		Watches(&networkingv1.NetworkPolicy{}, toOwner, children).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(r)
}

// relativesHandler queues the relatives of a tenant that was created, changed or deleted.
func (r *Reconciler) relativesHandler() handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
		for _, req := range reqs {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.relatives(ctx, e.Object, true))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.relatives(ctx, e.ObjectNew, false))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.relatives(ctx, e.Object, false))
		},
	}
}

// relatives are the tenants whose desired state depends on t: its parent (quota left over,
// deletion progress), its siblings (reservations) and its descendants (inherited access, host,
// services and scheduling class). A tenant just created changes the share of only the siblings
// granted after it (tenancy.OrderByCreation: created in the same second with a later name);
// the others are not queued.
func (r *Reconciler) relatives(ctx context.Context, o client.Object, created bool) []reconcile.Request {
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	own := tenancy.OwnNamespace(key)
	var out []reconcile.Request
	if parent, ok := tenancy.OwnerOf(key.Namespace); ok && !tenancy.IsRoot(key) {
		out = append(out, reconcile.Request{NamespacedName: parent})
	}
	// Read-only lists straight from the cache: no deep copies on this hot path.
	siblings, descendants := &tenancyv1.TenantList{}, &tenancyv1.TenantList{}
	if err := r.List(ctx, siblings, client.InNamespace(key.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing siblings")
	}
	if err := r.List(ctx, descendants, client.MatchingFields{ancestorIndex: own}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing descendants")
	}
	for i := range siblings.Items {
		if s := &siblings.Items[i]; !created || grantedAfter(s, o) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	for i := range descendants.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&descendants.Items[i])})
	}
	return out
}

// grantedAfter reports whether sibling s comes after o in the order quota is granted.
func grantedAfter(s, o client.Object) bool {
	a, b := s.GetCreationTimestamp(), o.GetCreationTimestamp()
	if !a.Equal(&b) {
		return b.Before(&a)
	}
	return s.GetName() > o.GetName()
}

// treeChanged passes the tenant events that can change the tenant or a relative: creation,
// deletion, a new generation (spec) and the start of deletion.
type treeChanged struct{ predicate.Funcs }

func (treeChanged) Create(event.CreateEvent) bool { return true }
func (treeChanged) Delete(event.DeleteEvent) bool { return true }
func (treeChanged) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
		e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
}
func (treeChanged) Generic(event.GenericEvent) bool { return false }

// notCreate passes every event but creation.
type notCreate struct{ predicate.Funcs }

func (notCreate) Create(event.CreateEvent) bool { return false }

// requeueWhileBlocked is how often a blocked deletion is looked at again, in case nothing we
// watch changes when the blocker goes away.
const requeueWhileBlocked = time.Minute

// quotaSettle is how long after a tenant's creation time its quota is first decided. Creation
// times have a resolution of one second, and children are granted quota in order of creation time,
// then name: a sibling created in the same second, or whose creation was still in admission, may
// come first. Waiting until that second is over, plus a second for admission, before reading the
// siblings from kube-apiserver lets the decision see them all.
const quotaSettle = 2 * time.Second
