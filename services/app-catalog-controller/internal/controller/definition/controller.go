// Package definition reconciles ApplicationDefinitions: it reports whether each one is served
// (Ready) or why not (Stalled: an invalid schema, a name another definition or a built-in
// Kubernetes resource already uses), and holds a definition's deletion until its apps are gone.
package definition

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/enqueue"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// Finalizer holds a definition's deletion while apps of its kind exist.
const Finalizer = "catalog.flotilla.dev/apps"

// DeletionBlockedReason: the definition waits for its apps to be deleted.
const DeletionBlockedReason = "DeletionBlocked"

// Reconciler reconciles ApplicationDefinitions.
type Reconciler struct {
	Client    client.Client
	Discovery discovery.DiscoveryInterface
	// Compiler caches compilations: every definition change re-judges every definition.
	Compiler catalog.Compiler

	mu       sync.Mutex
	builtins map[string]string // lower-cased name → group/resource, from discovery
	fetched  time.Time
}

// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=applicationdefinitions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=applicationdefinitions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;list;watch

// Reconcile reports one definition's state, written once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	def := &catalogv1.ApplicationDefinition{}
	if err := r.Client.Get(ctx, req.NamespacedName, def); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	h := patch.NewHelper(def)
	defer func() { status.Write(ctx, r.Client, h, def, &res, &retErr) }()
	if def.DeletionTimestamp != nil {
		return reconcile.Result{}, r.reconcileDelete(ctx, def)
	}
	if !controllerutil.ContainsFinalizer(def, Finalizer) {
		if err := patch.AddFinalizer(ctx, r.Client, def, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.reconcileNormal(ctx, def)
}

// reconcileNormal judges the definition: served (Ready), or Stalled with the reason and a
// terminal error, no retry (status.Stalled): a schema that does not compile is a spec a human must
// fix; a clash with another definition or a missing delivery grant waits for a human too, and the
// watches on definitions and on the delivery ClusterRole bring the definition back when that
// changes.
func (r *Reconciler) reconcileNormal(ctx context.Context, def *catalogv1.ApplicationDefinition) (reconcile.Result, error) {
	verdict, err := r.judge(ctx, def)
	if err != nil {
		conditions.MarkFalse(def, fmeta.ReadyCondition, fmeta.ProgressingReason, err.Error())
		conditions.MarkTrue(def, fmeta.ReconcilingCondition, fmeta.ProgressingReason, err.Error())
		return reconcile.Result{}, err
	}
	if verdict != nil {
		return status.Stalled(def, conditions.Stall{Reason: verdict.Reason, Message: verdict.Message}, reconcile.Result{})
	}
	conditions.Summarize(def, nil, nil)
	conditions.MarkTrue(def, fmeta.ReadyCondition, catalogv1.ServedReason,
		fmt.Sprintf("served as %s (%s.%s)", def.Spec.Names.Kind, def.Spec.Names.Plural, catalogv1.AppsGroupVersion.Group))
	return reconcile.Result{}, nil
}

// judge decides as the apps apiserver does: definitions clashing with a built-in resource are
// out, then catalog.Resolve settles clashes between definitions. nil means served.
func (r *Reconciler) judge(ctx context.Context, def *catalogv1.ApplicationDefinition) (*catalog.Rejection, error) {
	k, err := r.Compiler.Compile(def)
	if err != nil {
		return &catalog.Rejection{Reason: catalogv1.InvalidSchemaReason, Message: err.Error()}, nil
	}
	builtins, err := r.builtinNames()
	if err != nil {
		return nil, err
	}
	var clash []string
	for _, n := range k.Names() {
		if gr, ok := builtins[n]; ok {
			clash = append(clash, fmt.Sprintf("%q (%s)", n, gr))
		}
	}
	if len(clash) > 0 {
		return &catalog.Rejection{Reason: catalogv1.BuiltinConflictReason, Message: "names used by built-in resources: " + strings.Join(clash, ", ")}, nil
	}
	if rej, err := r.deliverable(ctx, def); rej != nil || err != nil {
		return rej, err
	}
	var all catalogv1.ApplicationDefinitionList
	if err := r.Client.List(ctx, &all); err != nil {
		return nil, err
	}
	var candidates []*catalogv1.ApplicationDefinition
	for i := range all.Items {
		other := &all.Items[i]
		if other.Name == def.Name {
			candidates = append(candidates, def)
		} else if !catalogv1.Withheld(other) {
			candidates = append(candidates, other)
		}
	}
	r.Compiler.Retain(all.Items)
	resolved := catalog.Resolve(candidates, r.Compiler.Compile)
	if rej, ok := resolved.Rejected[def.Name]; ok {
		return &rej, nil
	}
	return nil, nil
}

// deliverable checks that the tenants' delivery identity may create what the chart creates: the
// rules of the delivery ClusterRole (aggregated by kube-controller-manager) cover every declared
// resource with every verb Helm needs.
func (r *Reconciler) deliverable(ctx context.Context, def *catalogv1.ApplicationDefinition) (*catalog.Rejection, error) {
	if len(def.Spec.Delivery.Resources) == 0 {
		return nil, nil
	}
	role := &rbacv1.ClusterRole{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: tenancyv1.DeliveryClusterRole}, role); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	var want []rbacv1.PolicyRule
	for _, d := range def.Spec.Delivery.Resources {
		want = append(want, rbacv1.PolicyRule{APIGroups: []string{d.APIGroup}, Resources: d.Resources, Verbs: catalogv1.DeliveryVerbs})
	}
	if ok, missing := rbacvalidation.Covers(role.Rules, want); !ok {
		var names []string
		for _, m := range missing {
			names = append(names, fmt.Sprintf("%s %s.%s", strings.Join(m.Verbs, ","), strings.Join(m.Resources, ","), m.APIGroups[0]))
		}
		slices.Sort(names)
		names = slices.Compact(names)
		return &catalog.Rejection{Reason: catalogv1.DeliveryNotPermittedReason, Message: fmt.Sprintf(
			"spec.delivery: the tenants' delivery identity (ClusterRole %s) may not: %s; a platform admin grants it with a ClusterRole labelled %s=true",
			tenancyv1.DeliveryClusterRole, strings.Join(names, "; "), tenancyv1.LabelAggregateToDelivery)}, nil
	}
	return nil, nil
}

// builtinNames are the names (plural, singular, short names, kind) of the resources Kubernetes
// itself serves: the core group, dot-less groups and *.k8s.io groups. Refreshed once a minute.
func (r *Reconciler) builtinNames() (map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.builtins != nil && time.Since(r.fetched) < time.Minute {
		return r.builtins, nil
	}
	_, lists, err := r.Discovery.ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	names := map[string]string{}
	for _, l := range lists {
		group, _, _ := strings.Cut(l.GroupVersion, "/")
		if strings.Contains(l.GroupVersion, "/") && strings.Contains(group, ".") && !strings.HasSuffix(group, ".k8s.io") {
			continue
		}
		if !strings.Contains(l.GroupVersion, "/") {
			group = ""
		}
		for _, res := range l.APIResources {
			if strings.Contains(res.Name, "/") {
				continue
			}
			gr := res.Name
			if group != "" {
				gr += "." + group
			}
			for _, n := range append([]string{res.Name, res.SingularName, strings.ToLower(res.Kind)}, res.ShortNames...) {
				if n != "" {
					names[n] = gr
				}
			}
		}
	}
	r.builtins, r.fetched = names, time.Now()
	return names, nil
}

// reconcileDelete lets a definition go once no app of its kind is left. Its apps keep being
// served meanwhile (so customers can read and delete them) but no new ones are accepted; the
// deletion of each app's HelmRelease brings the definition back here.
func (r *Reconciler) reconcileDelete(ctx context.Context, def *catalogv1.ApplicationDefinition) error {
	if !controllerutil.ContainsFinalizer(def, Finalizer) {
		return nil
	}
	var hrs helmv2.HelmReleaseList
	if err := r.Client.List(ctx, &hrs, client.MatchingLabels{catalogv1.LabelDefinition: def.Name}); err != nil {
		return err
	}
	if len(hrs.Items) > 0 {
		var names []string
		for _, hr := range hrs.Items {
			names = append(names, catalog.AppNamespace(&hr)+"/"+hr.Labels[catalogv1.LabelAppName])
		}
		slices.Sort(names)
		more := ""
		if len(names) > 5 {
			more = fmt.Sprintf(" and %d more", len(names)-5)
			names = names[:5]
		}
		conditions.MarkDeleting(def, fmt.Sprintf("%d %s apps remain (%s%s): delete them first",
			len(hrs.Items), def.Spec.Names.Kind, strings.Join(names, ", "), more))
		conditions.Set(def, fmeta.ReadyCondition, "False", DeletionBlockedReason, conditions.Get(def, fmeta.ReadyCondition).Message)
		return nil
	}
	return patch.RemoveFinalizer(ctx, r.Client, def, Finalizer)
}

// SetupWithManager registers the reconciler. Every definition change re-judges all definitions
// (a clash involves two); an app's HelmRelease going away re-checks its terminating definition.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := enqueue.All[catalogv1.ApplicationDefinitionList](r.Client)
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[catalogv1.LabelDefinition]; name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
		}
		return nil
	})
	deliveryRole := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == tenancyv1.DeliveryClusterRole })
	return ctrl.NewControllerManagedBy(mgr).
		Named("applicationdefinition").
		Watches(&rbacv1.ClusterRole{}, all, builder.WithPredicates(deliveryRole)).
		For(&catalogv1.ApplicationDefinition{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&catalogv1.ApplicationDefinition{}, all, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() || e.ObjectNew.GetDeletionTimestamp() != nil
			},
		})).
		Watches(&helmv2.HelmRelease{}, byLabel, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		Complete(r)
}

// CacheByObject limits the manager's HelmRelease cache to apps.
func CacheByObject() map[client.Object]cache.ByObject {
	sel, _ := labels.Parse(catalogv1.LabelDefinition)
	return map[client.Object]cache.ByObject{&helmv2.HelmRelease{}: {Label: sel}}
}
