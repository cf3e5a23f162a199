// Package subnetpool reports how full each SubnetPool is and refuses a pool whose ranges overlap
// an older pool's. It allocates nothing: tenantsubnet does, with Subnets named after blocks.
package subnetpool
