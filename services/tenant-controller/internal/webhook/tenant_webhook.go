package webhook

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// Path is where the webhook is served.
const Path = "/validate-tenancy-flotilla-dev-v1alpha1-tenant"

// +kubebuilder:webhook:path=/validate-tenancy-flotilla-dev-v1alpha1-tenant,mutating=false,failurePolicy=fail,sideEffects=None,groups=tenancy.flotilla.dev,resources=tenants,verbs=create;update,versions=v1alpha1,name=tenants.tenancy.flotilla.dev,admissionReviewVersions=v1,timeoutSeconds=10

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// TenantValidator admits Tenants.
type TenantValidator struct {
	// Reader looks up parents, siblings and the tenant role bindings (the manager's cache).
	Reader client.Reader
	// Reviewer creates the SubjectAccessReviews that ask what the requester may do.
	Reviewer client.Client
}

var _ admission.Validator[*tenancyv1.Tenant] = &TenantValidator{}

// SetupWithManager registers the webhook. (The finalizer is added at admission by the chart's
// MutatingAdmissionPolicy, templates/finalizer-policy.yaml, inside kube-apiserver.)
func (v *TenantValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &tenancyv1.Tenant{}).WithValidator(v).WithValidatorCustomPath(Path).Complete()
}

// ValidateCreate implements admission.Validator.
func (v *TenantValidator) ValidateCreate(ctx context.Context, t *tenancyv1.Tenant) (admission.Warnings, error) {
	return v.validate(ctx, nil, t)
}

// ValidateUpdate implements admission.Validator. Updates that leave the spec alone (finalizers,
// labels) are always admitted, so that a tenant made invalid by a change elsewhere can still be
// reconciled and deleted.
func (v *TenantValidator) ValidateUpdate(ctx context.Context, old, t *tenancyv1.Tenant) (admission.Warnings, error) {
	if !t.DeletionTimestamp.IsZero() || equality.Semantic.DeepEqual(old.Spec, t.Spec) {
		return nil, nil
	}
	return v.validate(ctx, old, t)
}

// ValidateDelete implements admission.Validator.
func (v *TenantValidator) ValidateDelete(context.Context, *tenancyv1.Tenant) (admission.Warnings, error) {
	return nil, nil
}

// validate checks t, and what its writer may grant, against the tree. old is nil on creation.
func (v *TenantValidator) validate(ctx context.Context, old, t *tenancyv1.Tenant) (admission.Warnings, error) {
	errs := tenancy.Validate(t)
	key := client.ObjectKeyFromObject(t)
	p, err := tenancy.Place(key)
	if err != nil {
		return nil, invalid(t, errs)
	}
	var ancestors []*tenancyv1.Tenant
	if !tenancy.IsRoot(key) {
		var perrs field.ErrorList
		ancestors, perrs, err = v.validateWithinParent(ctx, t, p.Parent)
		if err != nil {
			return nil, err
		}
		errs = append(errs, perrs...)
	}
	berrs, err := v.validateBoundaries(ctx, old, t, p, ancestors)
	if err != nil {
		return nil, err
	}
	errs = append(errs, berrs...)
	warnings, err := v.childWarnings(ctx, t, p.Namespace)
	if err != nil {
		return nil, err
	}
	return warnings, invalid(t, errs)
}

func invalid(t *tenancyv1.Tenant, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(tenancyv1.GroupVersion.WithKind("Tenant").GroupKind(), t.Name, errs)
}

func (v *TenantValidator) validateWithinParent(ctx context.Context, t *tenancyv1.Tenant, parent types.NamespacedName) ([]*tenancyv1.Tenant, field.ErrorList, error) {
	ancestors, missing, err := tenancy.Ancestors(ctx, v.Reader, parent)
	if err != nil {
		return nil, nil, err
	}
	if missing != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata", "namespace"), t.Namespace,
			fmt.Sprintf("parent tenant %s does not exist", parent))}, nil
	}
	siblings := &tenancyv1.TenantList{}
	if err := v.Reader.List(ctx, siblings, client.InNamespace(t.Namespace)); err != nil {
		return nil, nil, err
	}
	return ancestors, tenancy.ValidateWithinParent(t, ancestors, siblings.Items), nil
}

// childWarnings tells whoever lowers a tenant's quota which children no longer fit; the change is
// admitted and the children report it in their conditions.
func (v *TenantValidator) childWarnings(ctx context.Context, t *tenancyv1.Tenant, ns string) (admission.Warnings, error) {
	children := &tenancyv1.TenantList{}
	if err := v.Reader.List(ctx, children, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var warnings admission.Warnings
	kids := tenancy.Children(children.Items)
	for _, c := range kids {
		if errs := tenancy.ValidateQuota(&c, []*tenancyv1.Tenant{t}, kids); len(errs) > 0 {
			warnings = append(warnings, fmt.Sprintf("child tenant %s no longer fits: %s", c.Name, errs.ToAggregate().Error()))
		}
	}
	return warnings, nil
}
