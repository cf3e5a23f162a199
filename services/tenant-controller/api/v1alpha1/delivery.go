package v1alpha1

import "strings"

// Delivery: what is installed for a tenant (its apps' Helm releases) is installed by
// helm-controller impersonating the tenant's delivery identity, never with helm-controller's own.
// For each tenant namespace the tenant-controller keeps a delivery namespace that no tenant role
// reaches. It holds the apps' HelmReleases, their chart sources, Helm's release records and the
// delivery ServiceAccount: no tenant user can read or edit the records, or run a pod as (or ask a
// token for) the identity.
//
// The identity may do, in the tenant's namespace only, what the DeliveryClusterRole grants (an
// aggregated ClusterRole: services that bring kinds charts create extend it through the
// flotilla.dev/aggregate-to-tenant-delivery label), and keep Helm's records in the delivery
// namespace (DeliveryStorageClusterRole).
const (
	// DeliveryServiceAccount is the ServiceAccount, in the delivery namespace, that HelmReleases
	// of the tenant's apps name.
	DeliveryServiceAccount = "flotilla-delivery"
	// DeliveryClusterRole is bound to the delivery identity in the tenant's namespace.
	DeliveryClusterRole = "flotilla:tenant:delivery"
	// DeliveryStorageClusterRole is bound to the delivery identity in the delivery namespace:
	// Helm's release records.
	DeliveryStorageClusterRole = "flotilla:tenant:delivery-storage"
	// DeliveryRoleBinding names both bindings.
	DeliveryRoleBinding = "flotilla-tenant-delivery"
	// LabelAggregateToDelivery on a ClusterRole adds its rules to DeliveryClusterRole.
	LabelAggregateToDelivery = "flotilla.dev/aggregate-to-tenant-delivery"
	// LabelDeliveryFor marks a delivery namespace with the tenant namespace it delivers into.
	LabelDeliveryFor = "tenancy.flotilla.dev/delivery-for"

	deliveryPrefix = "apps-"
	tenantPrefix   = "tenant-"
)

// DeliveryNamespace is the delivery namespace of a tenant namespace (tenant-acme-dev →
// apps-acme-dev, always shorter), or "" for a namespace that is not a tenant's.
func DeliveryNamespace(tenantNamespace string) string {
	rest, ok := strings.CutPrefix(tenantNamespace, tenantPrefix)
	if !ok || rest == "" {
		return ""
	}
	return deliveryPrefix + rest
}

// DeliveredNamespace is the tenant namespace a delivery namespace delivers into (the inverse of
// DeliveryNamespace), or "" for a namespace that is not a delivery namespace.
func DeliveredNamespace(deliveryNamespace string) string {
	rest, ok := strings.CutPrefix(deliveryNamespace, deliveryPrefix)
	if !ok || rest == "" {
		return ""
	}
	return tenantPrefix + rest
}
