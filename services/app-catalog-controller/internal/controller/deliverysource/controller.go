// Package deliverysource keeps, in each tenant's delivery namespace, copies of the Flux sources
// its apps' charts come from. helm-controller runs with Flux's multi-tenancy lockdown
// (--no-cross-namespace-refs): a HelmRelease may use only a source in its own namespace, and the
// apps' HelmReleases live in the tenant's delivery namespace (tenancyv1.DeliveryNamespace).
//
// A copy is made only where an app needs it, holds the original's spec, follows every change of
// the original, and is removed once no app of the namespace uses it. The apps apiserver names the
// copy in the HelmRelease it writes (catalog.SourceCopyName); until the copy exists helm-controller
// waits for it. The Secrets a source names (a private catalog's credentials) are copied beside it
// (secrets.go).
package deliverysource

import (
	"context"
	"errors"
	"fmt"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// FieldOwner is the server-side-apply field manager of the copies.
const FieldOwner = "flotilla-app-catalog-controller"

// SourceKinds are the Flux source kinds a definition's chart may come from.
var SourceKinds = []string{sourcev1.HelmRepositoryKind, sourcev1.GitRepositoryKind, sourcev1.OCIRepositoryKind, sourcev1.BucketKind}

// Reconciler reconciles one delivery namespace's source copies.
type Reconciler struct {
	Client client.Client
	// Secrets reads the Secrets the originals name: a cache of the namespaces the catalog's
	// credentials are kept in (SecretsCache), the only ones the controller may read.
	Secrets client.Reader
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=helmrepositories;gitrepositories;ocirepositories;buckets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch;delete

// Reconcile makes the copies of one delivery namespace match what its apps use.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, req.NamespacedName, ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ns.Labels[tenancyv1.LabelDeliveryFor] == "" || !ns.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	want, err := r.used(ctx, ns.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	var errs []error
	for name, ref := range want {
		errs = append(errs, r.applyCopy(ctx, ns.Name, name, ref))
	}
	errs = append(errs, r.prune(ctx, ns.Name, want))
	return reconcile.Result{}, errors.Join(errs...)
}

// used returns the sources the apps of a delivery namespace take their charts from, by copy name.
func (r *Reconciler) used(ctx context.Context, ns string) (map[string]catalogv1.SourceReference, error) {
	hrs := &helmv2.HelmReleaseList{}
	if err := r.Client.List(ctx, hrs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	want := map[string]catalogv1.SourceReference{}
	for _, hr := range hrs.Items {
		def := &catalogv1.ApplicationDefinition{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: hr.Labels[catalogv1.LabelDefinition]}, def)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ref := def.Spec.Chart.SourceRef
		want[catalog.SourceCopyName(ref)] = ref
	}
	return want, nil
}

func sourceGVK(kind string) schema.GroupVersionKind { return sourcev1.GroupVersion.WithKind(kind) }

// applyCopy writes the copy of ref into ns, unless it already holds the original's spec. A missing
// original is left to helm-controller to report: the copy follows once the original appears.
func (r *Reconciler) applyCopy(ctx context.Context, ns, name string, ref catalogv1.SourceReference) error {
	orig := &unstructured.Unstructured{}
	orig.SetGroupVersionKind(sourceGVK(ref.Kind))
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, orig); err != nil {
		return client.IgnoreNotFound(err)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(orig.GroupVersionKind())
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return err
	case live.GetLabels()[catalogv1.LabelSourceCopy] != "true":
		return fmt.Errorf("%s %s/%s exists and is not a copy made by the catalog: not overwritten", ref.Kind, ns, name)
	}
	copied := &unstructured.Unstructured{Object: map[string]any{"spec": orig.Object["spec"]}}
	copied.SetGroupVersionKind(orig.GroupVersionKind())
	copied.SetNamespace(ns)
	copied.SetName(name)
	copied.SetLabels(map[string]string{catalogv1.LabelSourceCopy: "true"})
	copied.SetAnnotations(map[string]string{catalogv1.AnnotationSourceCopyOf: ref.Namespace + "/" + ref.Name})
	if err := r.copySecrets(ctx, orig, copied, live); err != nil {
		return err
	}
	_, err := ssa.ApplyUnstructured(ctx, r.Client, copied, live, FieldOwner) // quiet at steady state
	return err
}

// prune deletes the copies in ns that no app uses any more.
func (r *Reconciler) prune(ctx context.Context, ns string, want map[string]catalogv1.SourceReference) error {
	var errs []error
	for _, kind := range SourceKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sourceGVK(kind + "List"))
		if err := r.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{catalogv1.LabelSourceCopy: "true"}); err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range list.Items {
			c := &list.Items[i]
			if ref, ok := want[c.GetName()]; ok && ref.Kind == kind {
				continue
			}
			// The copy is the only record of its Secret copies: it goes once they are gone.
			if err := r.deleteSecretCopies(ctx, ns, secretCopiesOf(c)); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, c)))
		}
	}
	return errors.Join(errs...)
}

// SetupWithManager watches delivery namespaces, the HelmReleases in them, the definitions they
// name and the catalog sources (originals and copies).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, secrets cache.Cache) error {
	isDelivery := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[tenancyv1.LabelDeliveryFor] != "" })
	b := ctrl.NewControllerManagedBy(mgr).Named("deliverysource").
		For(&corev1.Namespace{}, builder.WithPredicates(isDelivery)).
		// An app's source can change only with its definition (watched below): of its HelmRelease,
		// only creation and deletion matter, not helm-controller's many status writes.
		Watches(&helmv2.HelmRelease{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&catalogv1.ApplicationDefinition{}, handler.EnqueueRequestsFromMapFunc(r.namespacesUsingDefinition))
	for _, kind := range SourceKinds {
		src := &unstructured.Unstructured{}
		src.SetGroupVersionKind(sourceGVK(kind))
		b = b.Watches(src, handler.EnqueueRequestsFromMapFunc(r.namespacesCopying(kind)))
	}
	// A Secret of the catalog's changes (credentials rotated): every delivery namespace holding a
	// copy of a source of its namespace looks again. The cache holds only those namespaces.
	if secrets != nil {
		b = b.WatchesRawSource(source.Kind(secrets, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(
			func(ctx context.Context, s *corev1.Secret) []reconcile.Request {
				return r.namespacesCopyingFrom(ctx, s.Namespace)
			})))
	}
	return b.Complete(r)
}

// SecretsCache is a cache of the Secrets of the namespaces where the catalog's credentials are
// kept (--catalog-secret-namespaces), added to mgr; nil for none: no source may name a Secret.
func SecretsCache(mgr ctrl.Manager, namespaces []string) (cache.Cache, error) {
	if len(namespaces) == 0 {
		return nil, nil
	}
	byNamespace := map[string]cache.Config{}
	for _, ns := range namespaces {
		byNamespace[ns] = cache.Config{}
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: byNamespace, ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {}}})
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(c)
}

// namespacesCopyingFrom maps a namespace to the delivery namespaces holding a copy of one of its
// sources.
func (r *Reconciler) namespacesCopyingFrom(ctx context.Context, ns string) []reconcile.Request {
	return r.namespacesHoldingCopies(ctx, SourceKinds, func(of string) bool { return strings.HasPrefix(of, ns+"/") })
}

// namespacesUsingDefinition maps a definition to the delivery namespaces holding its apps.
func (r *Reconciler) namespacesUsingDefinition(ctx context.Context, o client.Object) []reconcile.Request {
	hrs := &helmv2.HelmReleaseList{}
	if err := r.Client.List(ctx, hrs, client.MatchingLabels{catalogv1.LabelDefinition: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the apps of a definition")
		return nil
	}
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, hr := range hrs.Items {
		if !seen[hr.Namespace] {
			seen[hr.Namespace] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: hr.Namespace}})
		}
	}
	return out
}

// namespacesCopying maps a source to the delivery namespaces holding a copy of it (or, for a copy,
// its own namespace, so that a copy changed or deleted by hand is restored).
func (r *Reconciler) namespacesCopying(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		if o.GetLabels()[catalogv1.LabelSourceCopy] == "true" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
		}
		orig := o.GetNamespace() + "/" + o.GetName()
		return r.namespacesHoldingCopies(ctx, []string{kind}, func(of string) bool { return of == orig })
	}
}

// namespacesHoldingCopies returns, once each, the namespaces holding a copy of one of kinds whose
// original (its AnnotationSourceCopyOf, <namespace>/<name>) matches. A map function cannot return
// an error: a failed list is logged and maps to nothing.
func (r *Reconciler) namespacesHoldingCopies(ctx context.Context, kinds []string, matches func(of string) bool) []reconcile.Request {
	var out []reconcile.Request
	seen := map[string]bool{}
	for _, kind := range kinds {
		copies := &unstructured.UnstructuredList{}
		copies.SetGroupVersionKind(sourceGVK(kind + "List"))
		if err := r.Client.List(ctx, copies, client.MatchingLabels{catalogv1.LabelSourceCopy: "true"}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing source copies")
			return nil
		}
		for _, c := range copies.Items {
			if matches(c.GetAnnotations()[catalogv1.AnnotationSourceCopyOf]) && !seen[c.GetNamespace()] {
				seen[c.GetNamespace()] = true
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.GetNamespace()}})
			}
		}
	}
	return out
}
