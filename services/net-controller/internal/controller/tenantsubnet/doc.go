// Package tenantsubnet gives every tenant namespace a Kube-OVN Subnet holding a block of a
// SubnetPool, and reports it in the namespace's TenantSubnet.
//
// The Kube-OVN Subnets are the allocation ledger: block i of pool p is held by the Subnet named
// p-i, so the API server's one-object-per-name rule keeps two allocators (two workers, two
// replicas) from handing out one block twice, and a restarted controller finds every allocation
// where it left it. A block is released, by deleting its Subnet, only once the namespace is no
// longer a tenant's and no address in the Subnet is held.
package tenantsubnet
