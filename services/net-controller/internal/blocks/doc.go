// Package blocks cuts pools (SubnetPools, LoadBalancerPools) into tenant namespaces' blocks and
// builds the Kube-OVN Subnets that hold SubnetPools' blocks (metallb builds the IPAddressPools that
// hold LoadBalancerPools'). All is pure but Claim and Reconcile, the allocation and reconcile the
// TenantSubnet and TenantAddressPool reconcilers share, which read and write through the clients
// and Holders they are given.
package blocks
