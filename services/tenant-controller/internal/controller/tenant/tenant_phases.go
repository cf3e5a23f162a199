package tenant

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	netv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// loadTree places the tenant and reads its ancestors and children. done is true when the tenant
// cannot go further (invalid placement, missing parent); the conditions say why.
func (r *Reconciler) loadTree(ctx context.Context, s *scope) (done bool, err error) {
	t := s.tenant
	key := client.ObjectKeyFromObject(t)
	if s.placement, err = tenancy.Place(key); err != nil {
		s.addStall(tenancyv1.InvalidPlacementReason, err.Error())
		conditions.MarkFalse(t, tenancyv1.NamespaceReadyCondition, tenancyv1.InvalidPlacementReason, err.Error())
		return true, nil
	}
	var ancestors []*tenancyv1.Tenant
	if !tenancy.IsRoot(key) {
		var missing *types.NamespacedName
		if ancestors, missing, err = tenancy.Ancestors(ctx, r.Client, s.placement.Parent); err != nil {
			return true, err
		}
		if missing != nil {
			msg := fmt.Sprintf("Waiting for ancestor tenant %s to exist", missing)
			conditions.MarkFalse(t, tenancyv1.NamespaceReadyCondition, tenancyv1.ParentNotFoundReason, msg)
			return true, nil
		}
	}
	s.chain = append(ancestors, t)
	children := &tenancyv1.TenantList{}
	if err := r.List(ctx, children, client.InNamespace(s.placement.Namespace)); err != nil {
		return true, err
	}
	s.children = tenancy.Children(children.Items)
	if !tenancy.IsRoot(key) {
		siblings := &tenancyv1.TenantList{}
		if err := r.List(ctx, siblings, client.InNamespace(t.Namespace)); err != nil {
			return true, err
		}
		s.siblings = siblings.Items
	}
	return false, nil
}

// parent is the tenant's parent, or nil for the root.
func (s *scope) parent() *tenancyv1.Tenant {
	if a := s.ancestors(); len(a) > 0 {
		return a[len(a)-1]
	}
	return nil
}

// quotaFit says why the tenant's quota does not fit its parent's, first come first served.
func (s *scope) quotaFit() field.ErrorList {
	if p := s.parent(); p != nil {
		return tenancy.FitQuota(s.tenant, p, s.siblings)
	}
	return nil
}

func quotaReason(errs field.ErrorList) string {
	if errs[0].Type == field.ErrorTypeRequired {
		return tenancyv1.QuotaNotDeclaredReason
	}
	return tenancyv1.ParentQuotaExceededReason
}

func (s *scope) addStall(reason, msg string) {
	if s.stall == nil {
		s.stall = &conditions.Stall{Reason: reason, Message: msg}
		return
	}
	s.stall.Message += "; " + msg
}

// reconcileNamespace creates or labels the tenant's namespace and records the tenant's place and
// inherited settings in its status.
func (r *Reconciler) reconcileNamespace(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, p := s.tenant, s.placement
	eff := tenancy.Resolve(s.chain)
	if errs := tenancy.ValidateSchedulingClass(t, s.ancestors()); len(errs) > 0 {
		s.addStall(tenancyv1.SchedulingConflictReason, errs.ToAggregate().Error())
	}
	t.Status.Namespace, t.Status.Path, t.Status.Depth = p.Namespace, p.Path, int32(p.Depth)
	t.Status.Host, t.Status.SchedulingClass, t.Status.Services = eff.Host, eff.SchedulingClass, eff.Services

	cur, found, err := r.cachedNamespace(ctx, p.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !found {
		// New, or made by someone else so recently that the cache has not seen it: kube-apiserver
		// is asked before the namespace is claimed. A new namespace waits for the quota decision,
		// whose siblings are read from kube-apiserver at the same time.
		if res, wait := settling(s); wait {
			return res, nil
		}
		var siblings *tenancyv1.TenantList
		if err := each(2, func(i int) error {
			var err error
			if i == 0 {
				cur, found, err = r.liveNamespace(ctx, p.Namespace)
			} else if quotaDecided(s) {
				siblings = &tenancyv1.TenantList{}
				err = r.APIReader.List(ctx, siblings, client.InNamespace(t.Namespace))
			}
			return err
		}); err != nil {
			return ctrl.Result{}, err
		}
		if !found && siblings != nil && holdNewNamespace(s, siblings.Items) {
			return ctrl.Result{}, nil
		}
	}
	if found && !cur.DeletionTimestamp.IsZero() {
		return waitTerminating(t, tenancyv1.NamespaceReadyCondition, p.Namespace), nil
	}
	owner := ""
	if !found || cur.Annotations[tenancyv1.AnnotationOwnerUID] != "" {
		owner = string(t.UID) // created, now or before, by this controller: ours to delete later
	}
	desired := tenancy.Namespace(p, t, eff, owner)
	if _, err := ssa.Apply(ctx, r.Client, r.Client, types.NamespacedName{Name: p.Namespace}, &corev1.Namespace{},
		desired, corev1ac.ExtractNamespace, tenancy.FieldOwner); err != nil {
		return failed(s, tenancyv1.NamespaceReadyCondition, err)
	}
	conditions.MarkTrue(t, tenancyv1.NamespaceReadyCondition, tenancyv1.ReconciledReason, "Namespace "+p.Namespace+" is in place")
	return ctrl.Result{}, nil
}

// quotaDecided reports whether the tenant's namespace waits for a quota decision: its parent caps
// quota.
func quotaDecided(s *scope) bool {
	p := s.parent()
	return p != nil && len(p.Spec.ResourceQuotas) > 0
}

// settling keeps a new tenant whose quota is to be decided waiting until quotaSettle after its
// creation. Creation times have a resolution of one second and children are granted quota in
// order of creation time, then name: by then, every sibling that comes before it is stored, and
// reading them from kube-apiserver (not the cache) orders concurrent creations the same way in
// every reconcile.
func settling(s *scope) (ctrl.Result, bool) {
	wait := settleWait(s)
	if wait <= 0 {
		return ctrl.Result{}, false
	}
	s.deciding = true
	conditions.MarkFalse(s.tenant, tenancyv1.NamespaceReadyCondition, "WaitingForQuota",
		"Waiting for siblings created at the same time before granting quota")
	return ctrl.Result{RequeueAfter: wait}, true
}

// settleWait is how long a new tenant whose quota is to be decided still waits (see settling).
func settleWait(s *scope) time.Duration {
	if !quotaDecided(s) {
		return 0
	}
	return time.Until(s.tenant.CreationTimestamp.Add(quotaSettle))
}

// holdNewNamespace keeps a tenant whose quota does not fit its parent's, given its siblings as
// read from kube-apiserver, from getting a namespace: without one nothing can be run, stored or
// granted on its behalf, and nothing has to be taken back when it is refused. (A tenant whose
// namespace already exists gets a ResourceQuota of zero instead; see reconcileQuota.)
func holdNewNamespace(s *scope, siblings []tenancyv1.Tenant) bool {
	s.siblings = siblings
	errs := s.quotaFit()
	if len(errs) == 0 {
		return false
	}
	conditions.MarkFalse(s.tenant, tenancyv1.NamespaceReadyCondition, quotaReason(errs),
		fmt.Sprintf("Namespace %s is created once the tenant's quota fits its parent's: %s", s.placement.Namespace, errs.ToAggregate().Error()))
	return true
}

// readNamespace reads a namespace the controller may claim; found is false when it does not
// exist. The cache may lag behind a namespace someone else just made: a miss is asked of the API
// server before the namespace is claimed as ours.
func (r *Reconciler) readNamespace(ctx context.Context, name string) (*corev1.Namespace, bool, error) {
	ns, found, err := r.cachedNamespace(ctx, name)
	if err != nil || found {
		return ns, found, err
	}
	return r.liveNamespace(ctx, name)
}

// cachedNamespace reads a namespace from the cache.
func (r *Reconciler) cachedNamespace(ctx context.Context, name string) (*corev1.Namespace, bool, error) {
	return getNamespace(ctx, r.Client, name)
}

// liveNamespace reads a namespace from kube-apiserver.
func (r *Reconciler) liveNamespace(ctx context.Context, name string) (*corev1.Namespace, bool, error) {
	return getNamespace(ctx, r.APIReader, name)
}

func getNamespace(ctx context.Context, r client.Reader, name string) (*corev1.Namespace, bool, error) {
	ns := &corev1.Namespace{}
	err := r.Get(ctx, types.NamespacedName{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return ns, err == nil, err
}

// waitTerminating reports, in cond, a namespace that must finish terminating before it is made again.
func waitTerminating(t *tenancyv1.Tenant, cond, name string) ctrl.Result {
	conditions.MarkFalse(t, cond, "NamespaceTerminating", fmt.Sprintf("Namespace %s is still terminating; it will be recreated once gone", name))
	return ctrl.Result{RequeueAfter: 10 * time.Second}
}

// namespaceReady guards the phases that write into the namespace.
func namespaceReady(s *scope, cond string) bool {
	if conditions.IsTrue(s.tenant, tenancyv1.NamespaceReadyCondition) {
		return true
	}
	conditions.MarkFalse(s.tenant, cond, "WaitingForNamespace", "Waiting for namespace "+s.placement.Namespace)
	return false
}

// reconcileAccess binds the four tenant roles in the namespace to this tenant's and its ancestors'
// groups and extra subjects, the delivery role to its apps' identities (the delivery namespace's
// ServiceAccounts), and the platform components' namespace grants to their ServiceAccounts.
func (r *Reconciler) reconcileAccess(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !namespaceReady(s, tenancyv1.AccessReadyCondition) {
		return ctrl.Result{}, nil
	}
	if !s.fenced || !s.isolated {
		conditions.MarkFalse(s.tenant, tenancyv1.AccessReadyCondition, "WaitingForQuota",
			"Role bindings are written once the namespace's ResourceQuota and network policies are in place")
		return ctrl.Result{}, nil
	}
	ns := s.placement.Namespace
	bindings := append(tenancy.RoleBindings(ns, s.chain, r.GroupPrefix), tenancy.DeliveryRoleBinding(ns, ns, tenancyv1.DeliveryClusterRole))
	bindings = append(bindings, tenancy.GrantRoleBindings(ns, r.NamespaceGrants)...)
	if err := applySet(ctx, r, ns, bindings,
		func() *rbacv1.RoleBinding { return &rbacv1.RoleBinding{} }, rbacv1ac.ExtractRoleBinding, &rbacv1.RoleBindingList{}); err != nil {
		return failed(s, tenancyv1.AccessReadyCondition, err)
	}
	conditions.MarkTrue(s.tenant, tenancyv1.AccessReadyCondition, tenancyv1.ReconciledReason, "Role bindings are in place")
	return ctrl.Result{}, nil
}

// reconcileQuota writes what is left of the tenant's quota after its children's reservations as
// the namespace's ResourceQuota, plus the LimitRange, once the tenant's quota fits its parent's
// (first come, first served: tenancy.FitQuota). A tenant that does not fit has no namespace yet
// (holdNewNamespace) or, when its namespace exists because it fitted before its parent was
// lowered, gets a ResourceQuota of zero: what runs there stays, nothing new that counts is admitted.
func (r *Reconciler) reconcileQuota(ctx context.Context, s *scope) (ctrl.Result, error) {
	t := s.tenant
	if s.deciding {
		conditions.MarkFalse(t, tenancyv1.QuotaReadyCondition, "WaitingForQuota", "Waiting for siblings created at the same time")
		return ctrl.Result{}, nil
	}
	errs := s.quotaFit()
	var hard corev1.ResourceList
	if len(errs) > 0 {
		reason, msg := quotaReason(errs), errs.ToAggregate().Error()
		conditions.MarkFalse(t, tenancyv1.QuotaReadyCondition, reason, msg)
		s.addStall(reason, msg)
		if !conditions.IsTrue(t, tenancyv1.NamespaceReadyCondition) {
			return ctrl.Result{}, nil
		}
		hard = tenancy.ZeroQuota(t, s.parent(), r.objectCounts(s))
	} else {
		if !namespaceReady(s, tenancyv1.QuotaReadyCondition) {
			return ctrl.Result{}, nil
		}
		hard = tenancy.OwnQuota(t, s.children, r.objectCounts(s))
	}
	ns := s.placement.Namespace
	if err := each(2, func(i int) error {
		if i == 0 {
			return applySet(ctx, r, ns, optional(tenancy.ResourceQuota(ns, hard)),
				func() *corev1.ResourceQuota { return &corev1.ResourceQuota{} }, corev1ac.ExtractResourceQuota, &corev1.ResourceQuotaList{})
		}
		return applySet(ctx, r, ns, optional(tenancy.LimitRange(ns, t)),
			func() *corev1.LimitRange { return &corev1.LimitRange{} }, corev1ac.ExtractLimitRange, &corev1.LimitRangeList{})
	}); err != nil {
		return failed(s, tenancyv1.QuotaReadyCondition, err)
	}
	s.fenced = true
	if len(errs) > 0 {
		return ctrl.Result{}, nil
	}
	msg := "No quota declared"
	if len(t.Spec.ResourceQuotas) > 0 {
		msg = "Quota is in place and fits the parent's"
	}
	conditions.MarkTrue(t, tenancyv1.QuotaReadyCondition, tenancyv1.ReconciledReason, msg)
	return ctrl.Result{}, nil
}

// reconcileNetworkPolicies writes the isolation policy and one policy per shared service the
// tenant provides.
func (r *Reconciler) reconcileNetworkPolicies(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !namespaceReady(s, tenancyv1.NetworkPolicyReadyCondition) {
		return ctrl.Result{}, nil
	}
	desired := tenancy.NetworkPolicies(s.placement, s.tenant)
	if err := applySet(ctx, r, s.placement.Namespace, desired,
		func() *networkingv1.NetworkPolicy { return &networkingv1.NetworkPolicy{} }, netv1ac.ExtractNetworkPolicy, &networkingv1.NetworkPolicyList{}); err != nil {
		return failed(s, tenancyv1.NetworkPolicyReadyCondition, err)
	}
	s.isolated = true
	conditions.MarkTrue(s.tenant, tenancyv1.NetworkPolicyReadyCondition, tenancyv1.ReconciledReason,
		fmt.Sprintf("%d network policies are in place", len(desired)))
	return ctrl.Result{}, nil
}

func failed(s *scope, cond string, err error) (ctrl.Result, error) {
	conditions.MarkFalse(s.tenant, cond, "ApplyFailed", err.Error())
	return ctrl.Result{}, err
}

// namedApplyConfiguration is a client-go apply configuration of a named object.
type namedApplyConfiguration interface {
	runtime.ApplyConfiguration
	GetName() *string
}

// applySet applies desired (all of one kind) into ns and deletes the objects of that kind the
// controller made there before and no longer wants.
func applySet[T client.Object, AC namedApplyConfiguration](ctx context.Context, r *Reconciler, ns string, desired []AC,
	newObj func() T, extract ssa.Extractor[T, AC], list client.ObjectList) error {
	keep := make([]string, 0, len(desired))
	for _, d := range desired {
		keep = append(keep, *d.GetName())
	}
	// The objects of one set are alike (all bindings, or all policies): no order among them matters.
	if err := each(len(desired), func(i int) error {
		_, err := ssa.Apply(ctx, r.Client, r.Client, types.NamespacedName{Namespace: ns, Name: keep[i]}, newObj(), desired[i], extract, tenancy.FieldOwner)
		return err
	}); err != nil {
		return err
	}
	return r.prune(ctx, ns, list, keep...)
}

// optional turns a possibly nil desired object into a set of zero or one.
func optional[T any](p *T) []*T {
	if p == nil {
		return nil
	}
	return []*T{p}
}

// prune deletes the objects of list's kind in ns that this controller created and no longer wants.
func (r *Reconciler) prune(ctx context.Context, ns string, list client.ObjectList, keep ...string) error {
	if err := r.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(tenancy.ManagedLabels)); err != nil {
		return err
	}
	return meta.EachListItem(list, func(o runtime.Object) error {
		obj := o.(client.Object)
		if slices.Contains(keep, obj.GetName()) {
			return nil
		}
		return client.IgnoreNotFound(r.Delete(ctx, obj))
	})
}

// reconcileDelivery keeps the tenant's delivery namespace (tenancyv1.DeliveryNamespace), where
// each app's identity lives, and the identities' access to Helm's release records there.
// No tenant role reaches the namespace. A namespace of that name the controller did not make is
// never taken over.
func (r *Reconciler) reconcileDelivery(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, p := s.tenant, s.placement
	if !namespaceReady(s, tenancyv1.DeliveryReadyCondition) {
		return ctrl.Result{}, nil
	}
	name := tenancyv1.DeliveryNamespace(p.Namespace)
	if s.delivery == nil {
		ns, found, err := r.readNamespace(ctx, name)
		s.delivery = &namespaceRead{ns, found, err}
	}
	cur, found, err := s.delivery.ns, s.delivery.found, s.delivery.err
	if err != nil {
		return ctrl.Result{}, err
	}
	if found && cur.Annotations[tenancyv1.AnnotationOwnerUID] != string(t.UID) {
		msg := fmt.Sprintf("Namespace %s exists and was not made for this tenant: it is not taken over; delete or rename it", name)
		conditions.MarkFalse(t, tenancyv1.DeliveryReadyCondition, tenancyv1.NamespaceConflictReason, msg)
		s.addStall(tenancyv1.NamespaceConflictReason, msg)
		return ctrl.Result{}, nil
	}
	if found && !cur.DeletionTimestamp.IsZero() {
		return waitTerminating(t, tenancyv1.DeliveryReadyCondition, name), nil
	}
	if _, err := ssa.Apply(ctx, r.Client, r.Client, types.NamespacedName{Name: name}, &corev1.Namespace{},
		tenancy.DeliveryNamespace(p, string(t.UID)), corev1ac.ExtractNamespace, tenancy.FieldOwner); err != nil {
		return failed(s, tenancyv1.DeliveryReadyCondition, err)
	}
	// The apps' identities' access to the release records, in the namespace just written (the
	// app catalog makes each app's ServiceAccount). The one ServiceAccount earlier versions made
	// for every app of the tenant (flotilla-delivery) goes.
	if err := each(2, func(i int) error {
		if i == 0 {
			return r.prune(ctx, name, &corev1.ServiceAccountList{})
		}
		return applySet(ctx, r, name, optional(tenancy.DeliveryRoleBinding(name, p.Namespace, tenancyv1.DeliveryStorageClusterRole)),
			func() *rbacv1.RoleBinding { return &rbacv1.RoleBinding{} }, rbacv1ac.ExtractRoleBinding, &rbacv1.RoleBindingList{})
	}); err != nil {
		return failed(s, tenancyv1.DeliveryReadyCondition, err)
	}
	conditions.MarkTrue(t, tenancyv1.DeliveryReadyCondition, tenancyv1.ReconciledReason,
		fmt.Sprintf("Each app is installed as its own identity in %s, held to its own release's objects", name))
	return ctrl.Result{}, nil
}
