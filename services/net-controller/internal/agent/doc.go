// Package agent holds the node agent's reconciler (noderouting); it is a package of its own so that
// the agent's RBAC, generated from its markers, stays apart from the controller's.
package agent
