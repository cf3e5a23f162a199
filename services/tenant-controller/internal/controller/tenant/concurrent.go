package tenant

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
)

// phase is a step of a reconcile and the conditions it sets.
type phase struct {
	conds []string
	run   func(context.Context, *scope) (ctrl.Result, error)
}

// concurrently runs phases at the same time, each on its own copy of the tenant, then takes each
// phase's conditions, stall and progress back into s in the order given, so that the result does
// not depend on which finished first. The phases must not depend on each other's writes.
func concurrently(ctx context.Context, s *scope, phases ...phase) (ctrl.Result, error) {
	forks := make([]*scope, len(phases))
	results := make([]ctrl.Result, len(phases))
	errs := make([]error, len(phases))
	var wg sync.WaitGroup
	for i, p := range phases {
		forks[i] = s.fork()
		wg.Go(func() { results[i], errs[i] = p.run(ctx, forks[i]) })
	}
	wg.Wait()
	res := ctrl.Result{}
	for i, p := range phases {
		s.join(forks[i], p.conds)
		res = lowestRequeue(res, results[i])
	}
	return res, errors.Join(errs...)
}

// fork copies s for a phase run concurrently: the tenant is its own copy; what the reconcile read
// about the tree is shared, read only.
func (s *scope) fork() *scope {
	f := *s
	f.tenant = s.tenant.DeepCopy()
	f.stall = nil
	return &f
}

// join takes back what a forked phase found: the conditions it owns, its stall, and whether it
// wrote the quota and the network policies.
func (s *scope) join(f *scope, conds []string) {
	for _, c := range conds {
		if got := meta.FindStatusCondition(f.tenant.Status.Conditions, c); got != nil {
			meta.SetStatusCondition(&s.tenant.Status.Conditions, *got)
		}
	}
	if f.stall != nil {
		s.addStall(f.stall.Reason, f.stall.Message)
	}
	s.fenced = s.fenced || f.fenced
	s.isolated = s.isolated || f.isolated
}

// each calls fn for 0..n-1 at the same time and joins the errors: independent writes of one kind.
func each(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
