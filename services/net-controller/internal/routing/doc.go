// Package routing turns the RoutingPolicies that select a node into kernel rules and routes
// (Desired, pure) and keeps them on the node with netlink (Applier), touching only what it owns:
// rules in the priority range RoutingPolicy allows, routes carrying the agent's route protocol
// number. A Watcher reports every rule, route or link change in the namespace, whoever made it,
// so an entry someone removed is put back at once.
package routing
