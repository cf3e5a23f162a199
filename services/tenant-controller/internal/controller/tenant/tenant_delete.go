package tenant

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// reconcileDelete tears a tenant down bottom-up: child tenants first, then the namespace (only if
// this controller created it for this tenant), then the finalizer. While something blocks, the
// conditions say what, as read from the blocking objects themselves.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	t := s.tenant
	if !controllerutil.ContainsFinalizer(t, tenancyv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(t)
	if _, err := tenancy.Place(key); err == nil {
		ns := tenancy.OwnNamespace(key)
		// In order: the children, the apps (uninstalled while their identities and
		// release records exist), the delivery namespace, the tenant's namespace.
		for _, step := range []struct {
			do      func(context.Context, *tenancyv1.Tenant, string) (bool, error)
			ns      string
			recheck time.Duration
		}{
			{r.deleteChildren, ns, requeueWhileBlocked},
			{r.deleteApps, ns, appsUninstallPoll},
			{r.deleteNamespace, tenancyv1.DeliveryNamespace(ns), requeueWhileBlocked},
			{r.deleteNamespace, ns, requeueWhileBlocked},
		} {
			waiting, err := step.do(ctx, t, step.ns)
			if err != nil {
				return ctrl.Result{}, err
			}
			if waiting {
				return ctrl.Result{RequeueAfter: step.recheck}, nil
			}
		}
	}
	if err := patch.RemoveFinalizer(ctx, r.Client, t, tenancyv1.Finalizer); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Tenant deleted")
	return ctrl.Result{}, nil
}

// deleteChildren deletes the tenants living in ns and reports whether any is still there.
func (r *Reconciler) deleteChildren(ctx context.Context, t *tenancyv1.Tenant, ns string) (bool, error) {
	children := &tenancyv1.TenantList{}
	if err := r.List(ctx, children, client.InNamespace(ns)); err != nil {
		return true, err
	}
	kids := tenancy.Children(children.Items)
	if len(kids) == 0 {
		return false, nil
	}
	var names []string
	for i := range kids {
		c := &kids[i]
		if c.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
				return true, err
			}
		}
		desc := c.Name
		if foreign := foreignFinalizers(c.Finalizers); len(foreign) > 0 {
			desc += " (finalizers " + strings.Join(foreign, ", ") + ")"
		}
		names = append(names, desc)
	}
	msg := "Waiting for child tenants to be deleted: " + strings.Join(names, ", ")
	conditions.MarkFalse(t, tenancyv1.NamespaceReadyCondition, tenancyv1.WaitingForChildrenReason, msg)
	conditions.MarkDeleting(t, msg)
	return true, nil
}

// deleteNamespace deletes the tenant's namespace if this controller created it for this tenant,
// and reports whether it is still there. A namespace it did not create is left in place, minus
// everything the controller put into it.
func (r *Reconciler) deleteNamespace(ctx context.Context, t *tenancyv1.Tenant, name string) (bool, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if ns.Annotations[tenancyv1.AnnotationOwnerUID] != string(t.UID) {
		return false, r.release(ctx, name)
	}
	if ns.DeletionTimestamp.IsZero() {
		if err := r.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			return true, fmt.Errorf("deleting namespace %s: %w", name, err)
		}
	}
	msg := "Namespace " + name + " is terminating: " + namespaceBlockers(ns)
	conditions.MarkFalse(t, tenancyv1.NamespaceReadyCondition, tenancyv1.DeletionBlockedReason, msg)
	conditions.MarkDeleting(t, msg)
	return true, nil
}

// appsUninstallPoll is how often a deletion waiting for its apps to be uninstalled looks again
// (HelmReleases are not watched).
const appsUninstallPoll = 5 * time.Second

// deleteApps uninstalls the apps of the tenant owning ns before any of its namespaces goes, so
// that Helm removes what it installed while the delivery identity and the release records still
// exist, and reports whether any is still there. Apps with deletion protection hold the deletion,
// naming them. Without Flux there are no apps.
func (r *Reconciler) deleteApps(ctx context.Context, t *tenancyv1.Tenant, ns string) (bool, error) {
	delivery := tenancyv1.DeliveryNamespace(ns)
	var protected []string
	for _, n := range []string{delivery, ns} { // ns: apps stored before delivery namespaces
		p, err := r.protectedApps(ctx, n)
		if err != nil {
			return true, err
		}
		protected = append(protected, p...)
	}
	if len(protected) > 0 {
		msg := fmt.Sprintf("Tenant %s holds apps with deletion protection: %s; clear their spec.deletionProtection to delete the tenant",
			t.Name, strings.Join(protected, ", "))
		conditions.MarkFalse(t, tenancyv1.NamespaceReadyCondition, tenancyv1.DeletionBlockedReason, msg)
		conditions.MarkDeleting(t, msg)
		return true, nil
	}
	apps := &metav1.PartialObjectMetadataList{}
	apps.SetGroupVersionKind(helmReleases)
	err := r.APIReader.List(ctx, apps, client.InNamespace(delivery))
	if meta.IsNoMatchError(err) || (err == nil && len(apps.Items) == 0) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("listing the apps in %s: %w", delivery, err)
	}
	var names []string
	for _, hr := range apps.Items {
		if hr.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, &hr); client.IgnoreNotFound(err) != nil {
				return true, fmt.Errorf("deleting app %s/%s: %w", delivery, hr.Name, err)
			}
		}
		names = append(names, appName(&hr))
	}
	sort.Strings(names)
	msg := "Waiting for apps to be uninstalled: " + strings.Join(names, ", ")
	conditions.MarkFalse(t, tenancyv1.NamespaceReadyCondition, tenancyv1.DeletionBlockedReason, msg)
	conditions.MarkDeleting(t, msg)
	return true, nil
}

// appName names an app by its kind and name, or its HelmRelease's name.
func appName(hr *metav1.PartialObjectMetadata) string {
	if kind, app := hr.Labels[fmeta.LabelAppKind], hr.Labels[fmeta.LabelAppName]; kind != "" && app != "" {
		return kind + " " + app
	}
	return hr.Name
}

// helmReleases are the apps of the apps.flotilla.dev API, as stored.
var helmReleases = schema.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmReleaseList"}

// protectedApps names the apps in ns whose deletion protection is on: HelmReleases labelled
// apps.flotilla.dev/deletion-protection=true (none where Flux is not installed). Read past the
// cache: it is asked only while a tenant is being deleted.
func (r *Reconciler) protectedApps(ctx context.Context, ns string) ([]string, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(helmReleases)
	err := r.APIReader.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{fmeta.LabelDeletionProtection: "true"})
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing protected apps in %s: %w", ns, err)
	}
	var names []string
	for i := range list.Items {
		names = append(names, appName(&list.Items[i]))
	}
	sort.Strings(names)
	return names, nil
}

// release removes what the controller wrote into a namespace it did not create.
func (r *Reconciler) release(ctx context.Context, name string) error {
	for _, list := range []client.ObjectList{&rbacv1.RoleBindingList{}, &corev1.ResourceQuotaList{},
		&corev1.LimitRangeList{}, &networkingv1.NetworkPolicyList{}} {
		if err := r.prune(ctx, name, list); err != nil {
			return err
		}
	}
	// Applying an empty configuration drops every label and annotation this field owner set.
	return r.Apply(ctx, corev1ac.Namespace(name), client.FieldOwner(tenancy.FieldOwner), client.ForceOwnership)
}

// namespaceBlockers says what keeps a namespace from going away, from the namespace's own status
// (written by kube-controller-manager's namespace controller) and finalizers.
func namespaceBlockers(ns *corev1.Namespace) string {
	var out []string
	for _, c := range ns.Status.Conditions {
		if c.Status == corev1.ConditionTrue && c.Message != "" {
			out = append(out, c.Message)
		}
	}
	if len(out) == 0 {
		var fins []string
		for _, f := range ns.Spec.Finalizers {
			fins = append(fins, string(f))
		}
		fins = append(fins, ns.Finalizers...)
		if len(fins) > 0 {
			out = append(out, "namespace finalizers remaining: "+strings.Join(fins, ", "))
		}
	}
	if len(out) == 0 {
		return "waiting for its content to be removed"
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func foreignFinalizers(fins []string) []string {
	var out []string
	for _, f := range fins {
		if f != tenancyv1.Finalizer {
			out = append(out, f)
		}
	}
	return out
}
