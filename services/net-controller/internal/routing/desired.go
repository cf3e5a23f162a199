package routing

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// Protocol is the route protocol number (rtnetlink's rtm_protocol) the agent marks its routes and
// rules with; /etc/iproute2/rt_protos names none this high but 1-4 and the routing daemons' (up to
// 192), so no other program uses it.
const Protocol = 0xf1 // 241

// Set is what should be on a node.
type Set struct {
	Rules  []netlink.Rule
	Routes []netlink.Route
	// Policies are the policies applied, with their generations.
	Policies []netv1.AppliedPolicy
	// Problems are the policies left out, each whole, and why.
	Problems []Problem
}

// Problem is a policy that cannot be applied on the node.
type Problem struct {
	Policy, Reason, Message string
	Generation              int64
}

// Links looks up an interface's index by name.
type Links func(name string) (int, bool)

// Desired computes the rules and routes of the policies that select a node with these labels.
// Policies are taken by name; one that reuses a priority an earlier one holds, or names an
// interface the node does not have, is left out whole (never half applied) and reported.
func Desired(policies []netv1.RoutingPolicy, nodeLabels map[string]string, links Links) Set {
	links = remember(links)
	sorted := slices.Clone(policies)
	slices.SortFunc(sorted, func(a, b netv1.RoutingPolicy) int { return strings.Compare(a.Name, b.Name) })
	var s Set
	taken := map[int]string{}
	for i := range sorted {
		p := &sorted[i]
		if ok, err := selects(p.Spec.NodeSelector, nodeLabels); err != nil || !ok {
			continue
		}
		rules, routes, prob := build(p, links)
		if prob == nil {
			for _, r := range rules {
				if other, ok := taken[r.Priority]; ok {
					prob = &Problem{Policy: p.Name, Reason: netv1.PolicyConflictReason,
						Message: fmt.Sprintf("RoutingPolicy %s: priority %d is held by RoutingPolicy %s", p.Name, r.Priority, other)}
					break
				}
			}
		}
		if prob != nil {
			prob.Generation = p.Generation
			s.Problems = append(s.Problems, *prob)
			continue
		}
		for _, r := range rules {
			taken[r.Priority] = p.Name
		}
		s.Rules = append(s.Rules, rules...)
		s.Routes = append(s.Routes, routes...)
		s.Policies = append(s.Policies, netv1.AppliedPolicy{Name: p.Name, Generation: p.Generation})
	}
	return s
}

// remember asks links about each name once.
func remember(links Links) Links {
	type answer struct {
		index int
		ok    bool
	}
	seen := map[string]answer{}
	return func(name string) (int, bool) {
		if a, ok := seen[name]; ok {
			return a.index, a.ok
		}
		i, ok := links(name)
		seen[name] = answer{i, ok}
		return i, ok
	}
}

func selects(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	if sel == nil {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}

func build(p *netv1.RoutingPolicy, links Links) ([]netlink.Rule, []netlink.Route, *Problem) {
	unknown := func(field, name string) *Problem {
		return &Problem{Policy: p.Name, Reason: netv1.UnknownInterfaceReason,
			Message: fmt.Sprintf("RoutingPolicy %s: %s names interface %s, which the node does not have", p.Name, field, name)}
	}
	var rules []netlink.Rule
	for i, r := range p.Spec.Rules {
		rule := *netlink.NewRule()
		rule.Priority, rule.Table, rule.Protocol, rule.Family = int(r.Priority), int(r.Table), Protocol, netlink.FAMILY_V4
		if r.From != "" {
			_, n, err := net.ParseCIDR(r.From)
			if err != nil {
				return nil, nil, &Problem{Policy: p.Name, Reason: "InvalidSpec", Message: err.Error()}
			}
			rule.Src = n
			if n.IP.To4() == nil {
				rule.Family = netlink.FAMILY_V6
			}
		}
		if r.IIF != "" {
			if _, ok := links(r.IIF); !ok {
				return nil, nil, unknown(fmt.Sprintf("spec.rules[%d].iif", i), r.IIF)
			}
			rule.IifName = r.IIF
		}
		if r.FWMark != 0 {
			rule.Mark = uint32(r.FWMark)
		}
		rules = append(rules, rule)
	}
	var routes []netlink.Route
	for i, r := range p.Spec.Routes {
		_, dst, err := net.ParseCIDR(r.Destination)
		if err != nil {
			return nil, nil, &Problem{Policy: p.Name, Reason: "InvalidSpec", Message: err.Error()}
		}
		route := netlink.Route{Table: int(r.Table), Dst: dst, Protocol: Protocol, Family: netlink.FAMILY_V4}
		if dst.IP.To4() == nil {
			route.Family = netlink.FAMILY_V6
		}
		if r.Gateway != "" {
			route.Gw = net.ParseIP(r.Gateway)
		}
		if r.Device != "" {
			idx, ok := links(r.Device)
			if !ok {
				return nil, nil, unknown(fmt.Sprintf("spec.routes[%d].device", i), r.Device)
			}
			route.LinkIndex = idx
		}
		if route.Gw == nil {
			route.Scope = netlink.SCOPE_LINK // a device route, as `ip route add … dev …` makes it
		}
		routes = append(routes, route)
	}
	return rules, routes, nil
}

// ruleID identifies a rule by what it matches and where it sends traffic.
type ruleID struct {
	priority, family, table int
	src                     netip.Prefix
	iif                     string
	mark                    uint32
}

func ruleKey(r *netlink.Rule) ruleID {
	return ruleID{r.Priority, r.Family, r.Table, prefix(r.Src), r.IifName, r.Mark}
}

// routeSlot is where a route lives: a table and a destination hold one route.
type routeSlot struct {
	table int
	dst   netip.Prefix
}

func slot(r *netlink.Route) routeSlot { return routeSlot{r.Table, prefix(r.Dst)} }

// routeID identifies a route by its slot, gateway and device.
type routeID struct {
	routeSlot
	gw   netip.Addr
	link int
}

func routeKey(r *netlink.Route) routeID {
	gw, _ := netip.AddrFromSlice(r.Gw)
	return routeID{slot(r), gw.Unmap(), r.LinkIndex}
}

// prefix is n as a comparable value (the zero Prefix for nil); an IPv4 network written in 16
// bytes is the same network as in 4.
func prefix(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, _ := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if a.Is4In6() && bits == 8*net.IPv6len {
		ones -= 96
	}
	return netip.PrefixFrom(a.Unmap(), ones)
}
