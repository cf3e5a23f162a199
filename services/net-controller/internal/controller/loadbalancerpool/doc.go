// Package loadbalancerpool keeps a LoadBalancerPool's status (blocks, blocks held, overlap with
// older pools) and its MetalLB L2Advertisement, and holds a deleted pool until no tenant holds a
// block of it.
package loadbalancerpool
