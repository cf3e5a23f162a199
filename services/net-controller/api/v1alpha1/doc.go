// Package v1alpha1 is the net.flotilla.dev/v1alpha1 API: SubnetPool and TenantSubnet (tenant
// subnets on Kube-OVN), TenantNetwork (tenant networks on OVN that may overlap each other) and
// RoutingPolicy (source routing on nodes). Other services import this package, and only this one.
// +kubebuilder:object:generate=true
// +groupName=net.flotilla.dev
package v1alpha1
