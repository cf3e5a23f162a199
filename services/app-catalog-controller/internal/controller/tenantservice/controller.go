// Package tenantservice orders a tenant's own shared services. A tenant that hosts ingress,
// monitoring or etcd itself (Tenant spec.ingress, spec.monitoring, spec.etcd; the tenant-controller
// labels its namespace with itself as that service's provider) gets an app of the kind whose
// ApplicationDefinition names the service in spec.tenantService, named after the service, in its
// namespace.
//
// The order goes through the apps API like a customer's: the apps apiserver defaults and validates
// it, runs admission and writes the HelmRelease that installs it as the app's own identity,
// within the tenant's quota. Nothing here acts with more than that. The app is created when
// missing and never changed or deleted: its values are the tenant admins' to set.
package tenantservice

import (
	"context"
	"errors"
	"fmt"
	"slices"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// FieldManager names the catalog in the managed fields of the apps it orders.
const FieldManager = "flotilla-app-catalog-controller"

// LabelTenantService marks an app the catalog ordered as a tenant's service (its value: the
// service). Informational: the app is found by kind and name.
const LabelTenantService = "catalog.flotilla.dev/tenant-service"

// Services are the shared services a tenant may host, by the namespace label naming their provider.
var Services = map[string]string{
	"ingress":    tenancyv1.LabelIngress,
	"monitoring": tenancyv1.LabelMonitoring,
	"etcd":       tenancyv1.LabelEtcd,
}

// Reconciler orders the services one tenant namespace hosts.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps.flotilla.dev,resources=*,verbs=create

// Reconcile orders each service the tenant namespace hosts and has no app for.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, req.NamespacedName, ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	hosted := hostedServices(ns)
	if len(hosted) == 0 || !ns.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	// The apps API takes orders only once the tenant-controller has made the delivery namespace;
	// its creation brings this namespace back here.
	delivery := &corev1.Namespace{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: tenancyv1.DeliveryNamespace(ns.Name)}, delivery)
	if apierrors.IsNotFound(err) || (err == nil && (delivery.Labels[tenancyv1.LabelDeliveryFor] != ns.Name || !delivery.DeletionTimestamp.IsZero())) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	defs := &catalogv1.ApplicationDefinitionList{}
	if err := r.Client.List(ctx, defs); err != nil {
		return reconcile.Result{}, err
	}
	// A transient failure of one service retries them all; only failures a human must fix do not.
	var transient, terminal []error
	for _, service := range hosted {
		def := provider(defs.Items, service)
		if def == nil {
			continue // no served definition provides it (yet): a definition's change brings it here
		}
		switch err := r.order(ctx, ns.Name, delivery.Name, service, def); {
		case errors.Is(err, reconcile.TerminalError(nil)):
			terminal = append(terminal, err)
		case err != nil:
			transient = append(transient, err)
		}
	}
	if len(transient) > 0 { // without the terminal ones, which would stop the retry (errors.Is)
		for _, err := range terminal {
			ctrl.LoggerFrom(ctx).Error(err, "Ordering a tenant service")
		}
		return reconcile.Result{}, errors.Join(transient...)
	}
	return reconcile.Result{}, errors.Join(terminal...)
}

// hostedServices are the services whose provider, by the namespace's labels, is the namespace
// itself, sorted.
func hostedServices(ns *corev1.Namespace) []string {
	if ns.Labels[tenancyv1.LabelTenant] == "" {
		return nil
	}
	var out []string
	for service, label := range Services {
		if ns.Labels[label] == ns.Name {
			out = append(out, service)
		}
	}
	slices.Sort(out)
	return out
}

// provider is the served definition providing service, the first by name, or nil.
func provider(defs []catalogv1.ApplicationDefinition, service string) *catalogv1.ApplicationDefinition {
	var best *catalogv1.ApplicationDefinition
	for i := range defs {
		d := &defs[i]
		if d.Spec.TenantService != service || !d.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(d.Status.Conditions, fmeta.ReadyCondition) {
			continue
		}
		if best == nil || d.Name < best.Name {
			best = d
		}
	}
	return best
}

// order creates the app providing service in tenant namespace ns, unless one exists (its
// HelmRelease in the delivery namespace, from the cache: nothing is written at steady state).
func (r *Reconciler) order(ctx context.Context, ns, delivery, service string, def *catalogv1.ApplicationDefinition) error {
	hrs := &helmv2.HelmReleaseList{}
	if err := r.Client.List(ctx, hrs, client.InNamespace(delivery), client.MatchingLabels{
		catalogv1.LabelAppKind: def.Spec.Names.Kind, catalogv1.LabelAppName: service,
	}); err != nil {
		return err
	}
	if len(hrs.Items) > 0 {
		return nil
	}
	app := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	app.SetAPIVersion(catalogv1.AppsGroupVersion.String())
	app.SetKind(def.Spec.Names.Kind)
	app.SetNamespace(ns)
	app.SetName(service)
	app.SetLabels(map[string]string{LabelTenantService: service})
	err := r.Client.Create(ctx, app, client.FieldOwner(FieldManager))
	if apierrors.IsAlreadyExists(err) {
		return nil // the cache had not seen it yet
	}
	if err != nil {
		err = fmt.Errorf("ordering %s %s/%s, the tenant's %s: %w", def.Spec.Names.Kind, ns, service, service, err)
		if apierrors.IsInvalid(err) { // the definition's defaults do not make a valid app: a human fixes it
			return reconcile.TerminalError(err)
		}
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Ordered a tenant service", "service", service, "kind", def.Spec.Names.Kind, "namespace", ns)
	return nil
}

// SetupWithManager watches tenant namespaces (a service turned on), delivery namespaces (orders
// become possible), the deletion of apps' HelmReleases (a service app deleted is ordered again)
// and definitions (a provider served).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("tenantservice").
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if tenant := o.GetLabels()[tenancyv1.LabelDeliveryFor]; tenant != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: tenant}}}
			}
			if o.GetLabels()[tenancyv1.LabelTenant] != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
			}
			return nil
		})).
		Watches(&helmv2.HelmRelease{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if _, ok := Services[o.GetLabels()[catalogv1.LabelAppName]]; !ok || o.GetLabels()[catalogv1.LabelAppKind] == "" {
				return nil
			}
			hr, ok := o.(*helmv2.HelmRelease)
			if !ok || hr.Spec.TargetNamespace == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: hr.Spec.TargetNamespace}}}
		}), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		Watches(&catalogv1.ApplicationDefinition{}, handler.EnqueueRequestsFromMapFunc(r.hostingNamespaces),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				d, ok := o.(*catalogv1.ApplicationDefinition)
				return ok && d.Spec.TenantService != ""
			}))).
		Complete(r)
}

// hostingNamespaces maps a definition to the tenant namespaces hosting the service it provides.
func (r *Reconciler) hostingNamespaces(ctx context.Context, o client.Object) []reconcile.Request {
	d, ok := o.(*catalogv1.ApplicationDefinition)
	if !ok {
		return nil
	}
	label, ok := Services[d.Spec.TenantService]
	if !ok {
		return nil
	}
	list := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, list, client.HasLabels{label}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the namespaces hosting a service", "service", d.Spec.TenantService)
		return nil
	}
	var out []reconcile.Request
	for _, ns := range list.Items {
		if ns.Labels[label] == ns.Name {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: ns.Name}})
		}
	}
	return out
}
