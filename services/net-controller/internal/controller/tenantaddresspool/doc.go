// Package tenantaddresspool gives every tenant namespace a block of a LoadBalancerPool as a MetalLB
// IPAddressPool that only the namespace's Services may use, reports it in the namespace's
// TenantAddressPool with the namespace's services.loadbalancers quota, and releases the block once
// the namespace is no longer a tenant's and no Service holds an address of it.
package tenantaddresspool
