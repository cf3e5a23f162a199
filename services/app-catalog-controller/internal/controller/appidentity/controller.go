// Package appidentity gives each app its own identity. helm-controller installs an app's chart as
// the ServiceAccount its HelmRelease names, which is the ServiceAccount of the tenant's delivery
// namespace named like the HelmRelease; the tenant-controller chart's admission policy holds it
// to the objects of its own release (see tenancyv1's Delivery). This reconciler makes that
// ServiceAccount, owned by the HelmRelease (helm-controller uninstalls a release only as a
// ServiceAccount that exists; the garbage collector removes it once the HelmRelease is gone), with
// no token mounted anywhere.
//
// It also moves the HelmReleases earlier versions wrote, which installed every app of a tenant as
// one ServiceAccount (flotilla-delivery), to their app's own identity, so that an upgraded
// platform moves its apps without reinstalling them: helm-controller finds the chart and the
// values unchanged, upgrades nothing, and acts as the app's own identity from then on (an
// uninstall included, so a HelmRelease being deleted is moved too).
package appidentity

import (
	"context"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// Reconciler keeps each app's identity: its ServiceAccount, and its HelmRelease naming it.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create

// Reconcile makes one app's identity and has its HelmRelease name it. An app that has both writes
// nothing.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	hr := &helmv2.HelmRelease{}
	if err := r.Client.Get(ctx, req.NamespacedName, hr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !anApp(hr) {
		return reconcile.Result{}, nil
	}
	if err := r.Client.Get(ctx, req.NamespacedName, &corev1.ServiceAccount{}); apierrors.IsNotFound(err) {
		// A ServiceAccount of that name made by someone else is used as it is, never taken over.
		if err := r.Client.Create(ctx, identity(hr)); err != nil && !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, err
		}
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if hr.Spec.ServiceAccountName == hr.Name {
		return reconcile.Result{}, nil
	}
	// At the resourceVersion read: the apps API may have written the app since.
	patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	hr.Spec.ServiceAccountName = hr.Name
	if err := r.Client.Patch(ctx, hr, patch); apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // read it again
	} else if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctrl.LoggerFrom(ctx).Info("moved the app to its own identity", "serviceAccountName", hr.Name)
	return reconcile.Result{}, nil
}

// identity is the ServiceAccount an app's HelmRelease names: owned by it, no token mounted.
func identity(hr *helmv2.HelmRelease) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: hr.Name, Namespace: hr.Namespace,
			Labels: map[string]string{catalogv1.LabelAppIdentity: "true"}},
		AutomountServiceAccountToken: ptr.To(false),
	}
	ref := metav1.NewControllerRef(hr, helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind))
	ref.BlockOwnerDeletion = nil // the owner is deleted only once helm-controller has uninstalled
	sa.OwnerReferences = []metav1.OwnerReference{*ref}
	return sa
}

// anApp reports whether hr is an app's HelmRelease in a delivery namespace. (The HelmReleases of
// apps stored before delivery namespaces, in the tenant's namespace, install as a ServiceAccount
// of the tenant's: with no more than its rights.)
func anApp(hr *helmv2.HelmRelease) bool {
	return hr.Labels[catalogv1.LabelDefinition] != "" && tenancyv1.DeliveredNamespace(hr.Namespace) != ""
}

// SetupWithManager watches the apps' HelmReleases (new ones, and those whose spec changed) and
// their identities.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	apps := predicate.NewPredicateFuncs(func(o client.Object) bool {
		hr, ok := o.(*helmv2.HelmRelease)
		return ok && anApp(hr)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("appidentity").
		For(&helmv2.HelmRelease{}, builder.WithPredicates(apps, predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ServiceAccount{}).
		Complete(r)
}

// CacheByObject keeps in the manager's cache only the ServiceAccounts this reconciler made.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.ServiceAccount{}: {Label: labels.SelectorFromSet(labels.Set{catalogv1.LabelAppIdentity: "true"})},
	}
}
