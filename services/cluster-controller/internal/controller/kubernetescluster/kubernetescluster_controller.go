package kubernetescluster

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// +kubebuilder:rbac:groups=cluster.flotilla.dev,resources=kubernetesclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cluster.flotilla.dev,resources=kubernetesclusters/status;kubernetesclusters/finalizers,verbs=get;patch;update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machinedeployments;machinehealthchecks,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinesets,verbs=get;list;watch
// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=kubeadmconfigtemplates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=kubevirtclusters;kubevirtmachinetemplates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=kamajicontrolplanes,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kamaji.clastix.io,resources=datastores,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=schedulingclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Finalizer holds a KubernetesCluster until its workers and control plane are gone. The chart's
// mutating admission policy adds it on create; the controller adds it where that did not run.
const Finalizer = "cluster.flotilla.dev/cluster"

// HasFinalizer reports whether a cluster carries Finalizer.
func HasFinalizer(o client.Object) bool { return controllerutil.ContainsFinalizer(o, Finalizer) }

// FieldOwner is the one field manager of everything the controller applies.
const FieldOwner = "cluster-controller"

// domainConditions are summarised into Ready, in this order: CloudControllersReady only where the
// platform runs each cluster's infrastructure controllers.
func (r *Reconciler) domainConditions() []string {
	c := []string{
		clusterapi.InfrastructureReadyCondition,
		clusterapi.ControlPlaneReadyCondition,
		clusterapi.WorkersReadyCondition,
		clusterapi.AddonsReadyCondition,
	}
	if r.Options.InfraNamespace != "" {
		c = append(c, clusterapi.CloudControllersReadyCondition)
	}
	return c
}

// Owned are the kinds a KubernetesCluster owns, watched so that a change of theirs (a status, a
// deletion) reconciles the cluster.
var Owned = []schema.GroupVersionKind{
	cluster.ClusterGVK, cluster.KubevirtClusterGVK, cluster.KamajiControlPlaneGVK,
	cluster.KubeadmConfigTemplateGVK, cluster.KubevirtMachineTmplGVK,
	cluster.MachineDeploymentGVK, cluster.MachineHealthCheckGVK,
	cluster.HelmRepositoryGVK, cluster.HelmReleaseGVK, cluster.ClusterResourceSetGVK,
	cluster.RoleBindingGVK,
}

// Reconciler reconciles KubernetesClusters into Cluster API objects.
type Reconciler struct {
	client.Client
	// APIReader reads past the cache.
	APIReader client.Reader
	Options   cluster.Options
	Recorder  recorder.EventRecorder
	// Retry is how long a deletion waiting for owned objects waits before looking again, should
	// no watch event come first.
	Retry time.Duration
	// Resync is how often a cluster is reconciled with no event (default 5m): Secrets are not
	// watched, so a kubeconfig the provider rotates, or a customer's kubeconfig Secret someone
	// deleted or changed, is put right within it.
	Resync time.Duration
	// Concurrency is how many clusters are reconciled at once (default 4).
	Concurrency int
}

// scope carries what one reconcile learned about a cluster.
type scope struct {
	kc        *clusterapi.KubernetesCluster
	ns        *corev1.Namespace
	stall     *conditions.Stall
	dataStore string
	// adminKubeconfig is the control plane's admin kubeconfig, as reconcileKubeconfig verified it
	// and wrote it into the customer's kubeconfig Secret; empty until then.
	adminKubeconfig []byte
	// awaitKubeconfig: the control plane exists, its admin kubeconfig Secret not yet.
	awaitKubeconfig bool
}

// kubeconfig: the customer's kubeconfig Secret holds the control plane's admin kubeconfig.
func (s *scope) kubeconfig() bool { return len(s.adminKubeconfig) > 0 }

// stallOn marks the cluster's condition False for a spec (or an object in the way) a human must
// fix, and stalls the reconcile there.
func (s *scope) stallOn(condition, reason, msg string) {
	conditions.MarkFalse(s.kc, condition, reason, msg)
	s.stall = &conditions.Stall{Reason: reason, Message: msg}
}

// Reconcile brings one KubernetesCluster to its desired state and writes its status once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	kc := &clusterapi.KubernetesCluster{}
	if err := r.Get(ctx, req.NamespacedName, kc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{kc: kc}
	helper := patch.NewHelper(kc)
	defer func() {
		status.Writer{Client: r.Client, Recorder: r.Recorder, Domain: r.domainConditions()}.Finish(ctx, helper, kc, s.stall, &res, &retErr)
	}()
	if !kc.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if !HasFinalizer(kc) {
		if err := patch.AddFinalizer(ctx, r.Client, kc, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.reconcileNormal(ctx, s); err != nil || s.stall != nil {
		return ctrl.Result{}, err
	}
	if s.awaitKubeconfig {
		return ctrl.Result{RequeueAfter: r.Retry}, nil
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// reconcileNormal runs the phases in order; a stall or an error stops the rest.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) error {
	for _, phase := range []func(context.Context, *scope) error{
		r.reconcileDatastore,
		r.reconcileReferences,
		r.reconcileObjects,
		r.reconcileKubeconfig,
		r.reconcileInfraKubeconfig,
		r.reconcileAddons,
		r.reconcileStatus,
	} {
		if err := phase(ctx, s); err != nil || s.stall != nil {
			return err // a stall ends the reconcile in Finish (status.Stalled)
		}
	}
	return nil
}

// SetupWithManager watches KubernetesClusters and every kind they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error { return r.SetupWithManagerAs(mgr, r) }

// SetupWithManagerAs is SetupWithManager with rec reconciling in r's place: rec wraps r (the tests
// count reconciles with it).
func (r *Reconciler) SetupWithManagerAs(mgr ctrl.Manager, rec reconcile.Reconciler) error {
	if r.Retry == 0 {
		r.Retry = 30 * time.Second
	}
	if r.Resync == 0 {
		r.Resync = 5 * time.Minute
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&clusterapi.KubernetesCluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{})))
	for _, gvk := range Owned {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		b = b.Owns(u)
	}
	// Cluster API labels what it makes for a cluster (named after it) with the cluster's name; what
	// the cluster has in the infrastructure namespace also names the cluster's namespace.
	byClusterName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ns, name := o.GetNamespace(), o.GetLabels()[clusterv1.ClusterNameLabel]
		if ns == r.Options.InfraNamespace {
			ns, name = o.GetLabels()[clusterapi.LabelClusterNamespace], o.GetLabels()[clusterapi.LabelCluster]
		}
		if ns == "" || name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	})
	// The infrastructure controllers' objects (the manager's cache holds only the infrastructure
	// namespace's, CacheByObject).
	if r.Options.InfraNamespace != "" {
		for _, gvk := range cluster.InfraKinds {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			b = b.Watches(u, byClusterName)
		}
	}
	// A MachineSet that goes may have held the last reference to a superseded template.
	ms := &unstructured.Unstructured{}
	ms.SetGroupVersionKind(cluster.MachineSetGVK)
	b = b.Watches(ms, byClusterName, builder.WithPredicates(predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
	}))
	// A StorageClass that appears (or goes) may be what a cluster waits for.
	b = b.Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.clustersNaming(ctx, func(kc *clusterapi.KubernetesCluster) bool {
			return slices.ContainsFunc(kc.Spec.NodeGroups, func(g clusterapi.NodeGroup) bool { return g.StorageClass == o.GetName() })
		})
	}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}))
	// So may a SchedulingClass, where the platform has them (the storage-controller's API); a
	// platform that installs it later restarts the controller to watch it.
	if _, err := mgr.GetRESTMapper().RESTMapping(cluster.SchedulingClassGVK.GroupKind(), cluster.SchedulingClassGVK.Version); err == nil {
		sc := &metav1.PartialObjectMetadata{}
		sc.SetGroupVersionKind(cluster.SchedulingClassGVK)
		b = b.WatchesMetadata(sc, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.clustersNaming(ctx, func(kc *clusterapi.KubernetesCluster) bool { return kc.Spec.SchedulingClass == o.GetName() })
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}))
	}
	// A DataStore made (or deleted, or changed) by someone else may be what a cluster waits for, or
	// what it must put back.
	ds := &unstructured.Unstructured{}
	ds.SetGroupVersionKind(cluster.DataStoreGVK)
	b = b.Watches(ds, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return requests(r.clustersOfEtcd(ctx, cluster.DataStoreEtcdNamespace(o.GetName())))
	}), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	// A namespace's etcd label decides the datastore: a change reconciles the namespace's clusters.
	b = b.Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var list clusterapi.KubernetesClusterList
		err := r.List(ctx, &list, client.InNamespace(o.GetName()))
		return requests(list.Items, err)
	}), builder.WithPredicates(predicate.LabelChangedPredicate{}))
	if r.Concurrency == 0 {
		r.Concurrency = 4
	}
	return b.Named("kubernetescluster").WithOptions(controller.Options{MaxConcurrentReconciles: r.Concurrency}).Complete(rec)
}

// clustersOfEtcd are the clusters in the namespaces the etcd of namespace etcd serves (the
// tenant-controller's label).
func (r *Reconciler) clustersOfEtcd(ctx context.Context, etcd string) ([]clusterapi.KubernetesCluster, error) {
	if etcd == "" {
		return nil, nil
	}
	var namespaces corev1.NamespaceList
	if err := r.List(ctx, &namespaces, client.MatchingLabels{tenancyv1.LabelEtcd: etcd}); err != nil {
		return nil, err
	}
	var out []clusterapi.KubernetesCluster
	for _, ns := range namespaces.Items {
		var list clusterapi.KubernetesClusterList
		if err := r.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
	}
	return out, nil
}

// requests are reconcile requests for clusters (none when err is set: a map function's read of
// the cache).
func requests(clusters []clusterapi.KubernetesCluster, err error) []reconcile.Request {
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(clusters))
	for i := range clusters {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&clusters[i])})
	}
	return reqs
}

// clustersNaming are the clusters, in every namespace, for which names is true.
func (r *Reconciler) clustersNaming(ctx context.Context, names func(*clusterapi.KubernetesCluster) bool) []reconcile.Request {
	var list clusterapi.KubernetesClusterList
	if err := r.List(ctx, &list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if names(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
