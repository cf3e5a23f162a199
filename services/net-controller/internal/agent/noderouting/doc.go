// Package noderouting is the node agent's reconciler: it keeps the rules and routes of the
// RoutingPolicies that select its node on the node (routing.Applier), and reports what it applied
// in the node's NodeRouting. Netlink changes on the node come back as events, so an entry someone
// else removed is restored at once.
package noderouting
