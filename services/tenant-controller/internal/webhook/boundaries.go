package webhook

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// requester answers, at most once each, what the user behind an admission request may do.
type requester struct {
	v     *TenantValidator
	user  authenticationv1.UserInfo
	admin *bool
}

// validateBoundaries keeps a Tenant's writer inside their own tenant: spec.access may grant only
// what the writer could bind with RBAC themselves, spec.host stays below the parent's host and
// spec.podSecurity is the platform's. Only what changes is checked, so that a tenant admin can
// still edit a child whose access or host a platform admin set. The controller binds the roles
// with its own identity, so this is the only place the writer's rights are ever asked.
func (v *TenantValidator) validateBoundaries(ctx context.Context, old, t *tenancyv1.Tenant, p tenancy.Placement, ancestors []*tenancyv1.Tenant) (field.ErrorList, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, err
	}
	who := &requester{v: v, user: req.UserInfo}
	var oldSpec tenancyv1.TenantSpec
	if old != nil {
		oldSpec = old.Spec
	}
	errs, err := who.checkAccess(ctx, oldSpec.Access, t, p.Namespace)
	if err != nil {
		return nil, err
	}
	spec := field.NewPath("spec")
	if t.Spec.Host != "" && t.Spec.Host != oldSpec.Host {
		parentHost := ""
		if len(ancestors) > 0 {
			parentHost = tenancy.Resolve(ancestors).Host
		}
		if !tenancy.UnderHost(t.Spec.Host, parentHost) {
			admin, err := who.platformAdmin(ctx)
			if err != nil {
				return nil, err
			}
			if !admin {
				msg := "only a platform admin may set a host here: the parent tenant has no host"
				if parentHost != "" {
					msg = fmt.Sprintf("must be the parent tenant's host %s or a name below it (only a platform admin may set another)", parentHost)
				}
				errs = append(errs, field.Forbidden(spec.Child("host"), msg))
			}
		}
	}
	if !equality.Semantic.DeepEqual(t.Spec.PodSecurity, oldSpec.PodSecurity) {
		admin, err := who.platformAdmin(ctx)
		if err != nil {
			return nil, err
		}
		if !admin {
			errs = append(errs, field.Forbidden(spec.Child("podSecurity"),
				"only a platform admin may set or change the Pod Security level of a tenant"))
		}
	}
	return errs, nil
}

// checkAccess refuses grants the writer may not make. own is the tenant's own namespace: the
// bindings land there and in its descendants'.
func (who *requester) checkAccess(ctx context.Context, old []tenancyv1.AccessBinding, t *tenancyv1.Tenant, own string) (field.ErrorList, error) {
	var errs field.ErrorList
	for i, a := range t.Spec.Access {
		p := field.NewPath("spec", "access").Index(i)
		added := false
		for j, s := range a.Subjects {
			if tenancy.Grants(old, a.Role, s) {
				continue
			}
			added = true
			sp := p.Child("subjects").Index(j)
			if tenancy.IsSystemSubject(s) {
				errs = append(errs, field.Forbidden(sp, fmt.Sprintf("%s %q is defined by Kubernetes and stands for more than one tenant's users: tenant roles are never granted to system: users or groups", s.Kind, s.Name)))
				continue
			}
			if s.Kind == rbacv1.ServiceAccountKind && !tenancy.InSubtree(s.Namespace, own) {
				admin, err := who.platformAdmin(ctx)
				if err != nil {
					return nil, err
				}
				if !admin {
					errs = append(errs, field.Forbidden(sp, fmt.Sprintf("ServiceAccount %s/%s is not in this tenant's namespace %s or below it: only a platform admin may grant a role to another namespace's ServiceAccount", s.Namespace, s.Name, own)))
				}
			}
		}
		if !added {
			continue
		}
		ok, err := who.mayBind(ctx, a.Role, t.Namespace)
		if err != nil {
			return nil, err
		}
		if !ok {
			errs = append(errs, field.Forbidden(p.Child("role"), fmt.Sprintf("you may not grant role %s: you need bind on clusterrole %s in namespace %s, or the role %s or a higher one there",
				a.Role, tenancy.ClusterRoleName(a.Role), t.Namespace, a.Role)))
		}
	}
	return errs, nil
}

// mayBind mirrors RBAC's escalation check for a binding of role in ns, whose bindings the
// controller repeats in every namespace below: allowed with bind on the role's ClusterRole there,
// or when the writer already holds all the role's permissions there, which for a tenant role
// means being bound to it or a higher one (the roles aggregate upwards) in ns.
func (who *requester) mayBind(ctx context.Context, role tenancyv1.TenantRole, ns string) (bool, error) {
	ok, err := who.allowed(ctx, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "bind",
		Group: rbacv1.GroupName, Resource: "clusterroles", Name: tenancy.ClusterRoleName(role)})
	if ok || err != nil {
		return ok, err
	}
	bindings := &rbacv1.RoleBindingList{}
	if err := who.v.Reader.List(ctx, bindings, client.InNamespace(ns), client.MatchingLabels(tenancy.ManagedLabels)); err != nil {
		return false, err
	}
	for _, rb := range bindings.Items {
		for _, held := range tenancyv1.Roles {
			if tenancy.RoleRank(held) < tenancy.RoleRank(role) || rb.Name != tenancy.RoleBindingName(held) ||
				rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != tenancy.ClusterRoleName(held) {
				continue
			}
			for _, s := range rb.Subjects {
				if who.is(s) {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// is reports whether the requester is subject s.
func (who *requester) is(s rbacv1.Subject) bool {
	switch s.Kind {
	case rbacv1.UserKind:
		return s.Name == who.user.Username
	case rbacv1.GroupKind:
		for _, g := range who.user.Groups {
			if g == s.Name {
				return true
			}
		}
	case rbacv1.ServiceAccountKind:
		return who.user.Username == "system:serviceaccount:"+s.Namespace+":"+s.Name
	}
	return false
}

// platformAdmin asks whether the requester may use tenancyv1.PlatformAdminVerb on tenants at
// cluster scope, which no tenant role grants.
func (who *requester) platformAdmin(ctx context.Context) (bool, error) {
	if who.admin == nil {
		ok, err := who.allowed(ctx, authorizationv1.ResourceAttributes{Verb: tenancyv1.PlatformAdminVerb,
			Group: tenancyv1.GroupVersion.Group, Resource: tenancyv1.PlatformAdminResource})
		if err != nil {
			return false, err
		}
		who.admin = &ok
	}
	return *who.admin, nil
}

// allowed asks kube-apiserver whether the requester, with all their groups and extra attributes,
// may do attrs.
func (who *requester) allowed(ctx context.Context, attrs authorizationv1.ResourceAttributes) (bool, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range who.user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: who.user.Username, UID: who.user.UID, Groups: who.user.Groups, Extra: extra, ResourceAttributes: &attrs,
	}}
	if err := who.v.Reviewer.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("asking whether %s may %s %s: %w", who.user.Username, attrs.Verb, attrs.Resource, err)
	}
	return sar.Status.Allowed, nil
}
