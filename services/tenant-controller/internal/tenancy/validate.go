package tenancy

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/flotilla-dev/flotilla/libs/apis/quantity"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// Validate checks what can be checked from the tenant alone: its placement and the shape of its
// spec. The CRD schema checks most of this too; this copy protects the controller from objects
// written before the schema existed and gives the webhook one place to report everything.
func Validate(t *tenancyv1.Tenant) field.ErrorList {
	var errs field.ErrorList
	if _, err := Place(keyOf(t)); err != nil {
		p := field.NewPath("metadata", "name")
		if !nameRE.MatchString(t.Name) {
			errs = append(errs, field.Invalid(p, t.Name, "must match ^[a-z][a-z0-9]*$: lower-case letters and digits, starting with a letter"))
		} else if _, ok := OwnerOf(t.Namespace); !ok && !IsRoot(keyOf(t)) {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "namespace"), t.Namespace, err.Error()))
		} else {
			errs = append(errs, field.Invalid(p, t.Name, err.Error()))
		}
	}
	spec := field.NewPath("spec")
	if t.Spec.Host != "" {
		for _, msg := range validation.IsDNS1123Subdomain(t.Spec.Host) {
			errs = append(errs, field.Invalid(spec.Child("host"), t.Spec.Host, msg))
		}
	}
	if t.Spec.SchedulingClass != "" {
		for _, msg := range validation.IsDNS1123Label(t.Spec.SchedulingClass) {
			errs = append(errs, field.Invalid(spec.Child("schedulingClass"), t.Spec.SchedulingClass, msg))
		}
	}
	errs = append(errs, validateResources(spec.Child("resourceQuotas"), t.Spec.ResourceQuotas)...)
	if lr := t.Spec.LimitRange; lr != nil {
		p := spec.Child("limitRange")
		errs = append(errs, validateResources(p.Child("default"), lr.Default)...)
		errs = append(errs, validateResources(p.Child("defaultRequest"), lr.DefaultRequest)...)
		for name, req := range lr.DefaultRequest {
			if lim, ok := lr.Default[name]; ok && quantity.InRange(req) && quantity.InRange(lim) && req.Cmp(lim) > 0 {
				errs = append(errs, field.Invalid(p.Child("defaultRequest").Key(string(name)), req.String(),
					fmt.Sprintf("must not exceed spec.limitRange.default[%s] (%s)", name, lim.String())))
			}
		}
	}
	seen := map[tenancyv1.TenantRole]bool{}
	for i, a := range t.Spec.Access {
		p := spec.Child("access").Index(i)
		if !isRole(a.Role) {
			errs = append(errs, field.NotSupported(p.Child("role"), a.Role, roleNames()))
		}
		if seen[a.Role] {
			errs = append(errs, field.Duplicate(p.Child("role"), a.Role))
		}
		seen[a.Role] = true
		if len(a.Subjects) == 0 {
			errs = append(errs, field.Required(p.Child("subjects"), "at least one subject"))
		}
		for j, s := range a.Subjects {
			sp := p.Child("subjects").Index(j)
			switch s.Kind {
			case "User", "Group":
			case "ServiceAccount":
				if s.Namespace == "" {
					errs = append(errs, field.Required(sp.Child("namespace"), "required for a ServiceAccount"))
				}
			default:
				errs = append(errs, field.NotSupported(sp.Child("kind"), s.Kind, []string{"User", "Group", "ServiceAccount"}))
			}
			if s.Name == "" {
				errs = append(errs, field.Required(sp.Child("name"), ""))
			}
		}
	}
	return errs
}

func validateResources(p *field.Path, rl corev1.ResourceList) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedNames(rl) {
		q := rl[name]
		for _, msg := range validation.IsQualifiedName(string(name)) {
			errs = append(errs, field.Invalid(p.Key(string(name)), string(name), "resource name: "+msg))
		}
		if err := quantity.Validate(p.Key(string(name)), q); err != nil {
			errs = append(errs, err)
		} else if q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Key(string(name)), q.String(), "must not be negative"))
		}
	}
	return errs
}

// ValidateWithinParent checks a tenant against its ancestors (root first, the parent last) and
// siblings (the tenants in the same namespace): the reservation rule for quotas and
// scheduling-class inheritance.
func ValidateWithinParent(t *tenancyv1.Tenant, ancestors []*tenancyv1.Tenant, siblings []tenancyv1.Tenant) field.ErrorList {
	return append(ValidateQuota(t, ancestors, siblings), ValidateSchedulingClass(t, ancestors)...)
}

// ValidateQuota applies the reservation rule: for every resource the parent caps, the tenant
// declares its share, and the shares of all the parent's children fit the parent's cap.
func ValidateQuota(t *tenancyv1.Tenant, ancestors []*tenancyv1.Tenant, siblings []tenancyv1.Tenant) field.ErrorList {
	var errs field.ErrorList
	if len(ancestors) == 0 {
		return nil
	}
	parent := ancestors[len(ancestors)-1]
	p := field.NewPath("spec", "resourceQuotas")
	for _, name := range sortedNames(parent.Spec.ResourceQuotas) {
		limit, _ := quotaOf(parent, name)
		own, ok := quotaOf(t, name)
		if !ok {
			errs = append(errs, field.Required(p.Key(string(name)),
				fmt.Sprintf("parent tenant %s caps %s at %s, so this tenant must declare its share of it", parent.Name, name, limit.String())))
			continue
		}
		reserved := resource.Quantity{}
		var others []string
		for _, s := range siblings {
			// A sibling being deleted still counts: its namespace, and what runs in it, lives on
			// until its teardown finishes, which is when the Tenant goes away.
			if s.Name == t.Name || IsRoot(keyOf(&s)) {
				continue
			}
			if q, ok := quotaOf(&s, name); ok && !q.IsZero() {
				reserved.Add(q)
				others = append(others, s.Name+"="+q.String())
			}
		}
		total := reserved.DeepCopy()
		total.Add(own)
		if total.Cmp(limit) > 0 {
			avail := limit.DeepCopy()
			avail.Sub(reserved)
			if avail.Sign() < 0 {
				avail = resource.Quantity{}
			}
			msg := fmt.Sprintf("exceeds what parent tenant %s has left: %s caps it at %s", parent.Name, parent.Name, limit.String())
			if len(others) > 0 {
				msg += fmt.Sprintf(", siblings reserve %s (%s)", reserved.String(), strings.Join(others, ", "))
			}
			msg += fmt.Sprintf(", %s is available", avail.String())
			errs = append(errs, field.Invalid(p.Key(string(name)), own.String(), msg))
		}
	}
	return errs
}

// ValidateSchedulingClass forbids setting a scheduling class below an ancestor that set one.
func ValidateSchedulingClass(t *tenancyv1.Tenant, ancestors []*tenancyv1.Tenant) field.ErrorList {
	var errs field.ErrorList
	if t.Spec.SchedulingClass != "" {
		if from, class := InheritedSchedulingClass(ancestors); class != "" && class != t.Spec.SchedulingClass {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "schedulingClass"),
				fmt.Sprintf("ancestor tenant %s already sets scheduling class %q, which this tenant inherits", from, class)))
		}
	}
	return errs
}

// InheritedSchedulingClass returns the scheduling class set nearest the root among ancestors, and
// the tenant that set it.
func InheritedSchedulingClass(ancestors []*tenancyv1.Tenant) (string, string) {
	for _, a := range ancestors {
		if a.Spec.SchedulingClass != "" {
			return a.Name, a.Spec.SchedulingClass
		}
	}
	return "", ""
}

func isRole(r tenancyv1.TenantRole) bool {
	for _, x := range tenancyv1.Roles {
		if x == r {
			return true
		}
	}
	return false
}

func roleNames() []string {
	out := make([]string, len(tenancyv1.Roles))
	for i, r := range tenancyv1.Roles {
		out[i] = string(r)
	}
	return out
}

// quotaOf is t's quota of name, capped (quantity.Cap) so that a value admitted before the
// webhook refused it cannot make the quota arithmetic run for minutes.
func quotaOf(t *tenancyv1.Tenant, name corev1.ResourceName) (resource.Quantity, bool) {
	q, ok := t.Spec.ResourceQuotas[name]
	return quantity.Cap(q), ok
}

func sortedNames(rl corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(rl))
	for n := range rl {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
