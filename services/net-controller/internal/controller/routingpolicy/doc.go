// Package routingpolicy summarises the nodes' NodeRoutings into each RoutingPolicy's status: Ready
// once every node it selects has applied its current generation, Stalled when a node refuses it.
package routingpolicy
