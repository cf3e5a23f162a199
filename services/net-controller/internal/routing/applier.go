package routing

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// Applier keeps a Set on one network namespace (the handle's).
type Applier struct {
	H *netlink.Handle
}

// Links looks interfaces up in the applier's namespace.
func (a *Applier) Links(name string) (int, bool) {
	l, err := a.H.LinkByName(name)
	if err != nil {
		return 0, false
	}
	return l.Attrs().Index, true
}

// Apply brings the namespace's own rules and routes to want and reports how many it added,
// replaced or deleted (0 when the namespace already holds want: nothing is written). Routes go in
// before the rules that lead to their tables, and rules go before their routes: a table is never
// reachable half-filled. Rules outside the agent's priority range and routes without its protocol
// number are never touched.
func (a *Applier) Apply(want Set) (int, error) {
	haveRules, err := a.ownRules()
	if err != nil {
		return 0, err
	}
	haveRoutes, err := a.ownRoutes()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	// Routes: add what is missing; a route of the agent's in the same slot is replaced.
	haveSlots := make(map[routeSlot]bool, len(haveRoutes))
	for _, h := range haveRoutes {
		haveSlots[slot(&h)] = true
	}
	wantRoutes := make(map[routeID]bool, len(want.Routes))
	taken := make(map[routeSlot]bool, len(want.Routes))
	for i := range want.Routes {
		r := want.Routes[i]
		wantRoutes[routeKey(&r)] = true
		taken[slot(&r)] = true
		if _, ok := haveRoutes[routeKey(&r)]; ok {
			continue
		}
		op := a.H.RouteAdd
		if haveSlots[slot(&r)] {
			op = a.H.RouteReplace
		}
		if err := op(&r); err != nil {
			errs = append(errs, fmt.Errorf("route %s in table %d: %w", r.Dst, r.Table, err))
			continue
		}
		n++
	}
	// Rules: add the missing ones before dropping those they replace (Linux keeps both meanwhile).
	wantRules := make(map[ruleID]bool, len(want.Rules))
	for i := range want.Rules {
		r := want.Rules[i]
		wantRules[ruleKey(&r)] = true
		if _, ok := haveRules[ruleKey(&r)]; ok {
			continue
		}
		if err := a.H.RuleAdd(&r); err != nil {
			errs = append(errs, fmt.Errorf("rule priority %d: %w", r.Priority, err))
			continue
		}
		n++
	}
	for k, r := range haveRules {
		if !wantRules[k] {
			if err := a.H.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting rule priority %d: %w", r.Priority, err))
				continue
			}
			n++
		}
	}
	for k, r := range haveRoutes {
		if !wantRoutes[k] && !taken[slot(&r)] {
			if err := a.H.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("deleting route %s in table %d: %w", r.Dst, r.Table, err))
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// ownRules are the namespace's rules in the agent's priority range, by key.
func (a *Applier) ownRules() (map[ruleID]netlink.Rule, error) {
	all, err := a.H.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing rules: %w", err)
	}
	out := map[ruleID]netlink.Rule{}
	for _, r := range all {
		if r.Priority >= netv1.MinRulePriority && r.Priority <= netv1.MaxRulePriority {
			out[ruleKey(&r)] = r
		}
	}
	return out, nil
}

// ownRoutes are the namespace's routes carrying the agent's protocol number, in any table, by key.
func (a *Applier) ownRoutes() (map[routeID]netlink.Route, error) {
	all, err := a.H.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: Protocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	out := make(map[routeID]netlink.Route, len(all))
	for _, r := range all {
		out[routeKey(&r)] = r
	}
	return out, nil
}
