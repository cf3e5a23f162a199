package tenancy

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/flotilla-dev/flotilla/libs/apis/quantity"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// maxNamed caps how many siblings a quota message names, so that a parent with many children
// still gets a readable condition.
const maxNamed = 5

// FitQuota decides, first come first served, whether t's declared quota fits what its parent has
// left. The webhook's check (ValidateQuota) reads a cache, so concurrent creations can all pass it;
// this is the decision the reconciler acts on. The parent's children, t among them and those being
// deleted included, are taken in order of creation time, then name; each is granted its share when
// it fits, for every resource the parent caps, beside the earlier children granted theirs. A child
// that does not declare a capped resource is never granted. t fits when it is granted.
//
// Every reconcile of every child computes the same order from the same siblings, so the outcome
// does not depend on which reconcile or which webhook call ran first.
func FitQuota(t *tenancyv1.Tenant, parent *tenancyv1.Tenant, siblings []tenancyv1.Tenant) field.ErrorList {
	caps := quantity.CapAll(parent.Spec.ResourceQuotas)
	if len(caps) == 0 {
		return nil
	}
	p := field.NewPath("spec", "resourceQuotas")
	var errs field.ErrorList
	for _, name := range sortedNames(caps) {
		if _, ok := t.Spec.ResourceQuotas[name]; !ok {
			limit := caps[name]
			errs = append(errs, field.Required(p.Key(string(name)),
				fmt.Sprintf("parent tenant %s caps %s at %s, so this tenant must declare its share of it", parent.Name, name, limit.String())))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	granted := map[string]resource.Quantity{}
	var holders []string
	for _, s := range OrderByCreation(t, siblings) {
		short := shortfall(s, caps, granted)
		if s.Name != t.Name {
			if short == nil {
				holders = append(holders, s.Name)
				addAll(granted, s, caps)
			}
			continue
		}
		for _, name := range sortedNames(caps) {
			if _, over := short[string(name)]; !over {
				continue
			}
			limit, held := caps[name], granted[string(name)]
			avail := limit.DeepCopy()
			avail.Sub(held)
			if avail.Sign() < 0 {
				avail = resource.Quantity{}
			}
			own, _ := quotaOf(t, name)
			msg := fmt.Sprintf("exceeds what parent tenant %s has left: %s caps it at %s", parent.Name, parent.Name, limit.String())
			if len(holders) > 0 {
				msg += fmt.Sprintf(", earlier siblings hold %s (%s)", held.String(), nameList(holders))
			}
			msg += fmt.Sprintf(", %s is available", avail.String())
			errs = append(errs, field.Invalid(p.Key(string(name)), own.String(), msg))
		}
		return errs
	}
	return nil
}

// OrderByCreation returns siblings with t in place of its stored copy (or added, when the list
// does not hold it yet), the root tenant left out, ordered by creation time, then name: the order
// in which children are granted their quota.
func OrderByCreation(t *tenancyv1.Tenant, siblings []tenancyv1.Tenant) []*tenancyv1.Tenant {
	out := []*tenancyv1.Tenant{t}
	for i := range siblings {
		s := &siblings[i]
		if s.Name != t.Name && !IsRoot(keyOf(s)) {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// shortfall returns the capped resources for which s does not fit beside what is granted, or nil
// when it fits for all of them. A resource s does not declare counts as not fitting.
func shortfall(s *tenancyv1.Tenant, caps corev1.ResourceList, granted map[string]resource.Quantity) map[string]bool {
	var out map[string]bool
	for name, limit := range caps {
		own, ok := quotaOf(s, name)
		total := granted[string(name)]
		total = total.DeepCopy()
		total.Add(own)
		if !ok || total.Cmp(limit) > 0 {
			if out == nil {
				out = map[string]bool{}
			}
			out[string(name)] = true
		}
	}
	return out
}

func addAll(granted map[string]resource.Quantity, s *tenancyv1.Tenant, caps corev1.ResourceList) {
	for name := range caps {
		q := granted[string(name)]
		q = q.DeepCopy()
		own, _ := quotaOf(s, name)
		q.Add(own)
		granted[string(name)] = q
	}
}

func nameList(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}
