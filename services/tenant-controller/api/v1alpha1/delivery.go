package v1alpha1

import "strings"

// Delivery: what is installed for a tenant (its apps' Helm releases) is installed by
// helm-controller impersonating the app's own delivery identity, never with helm-controller's
// own. For each tenant namespace the tenant-controller keeps a delivery namespace that no tenant
// role reaches. It holds the apps' HelmReleases, their chart sources and Helm's release records:
// no tenant user can read or edit the records, or act as an app's identity.
//
// An app's identity is the ServiceAccount of the delivery namespace named like its HelmRelease
// (which names its Helm release the same): system:serviceaccount:apps-acme:redis-cache. The app
// catalog makes it, owned by the HelmRelease, with no token mounted. Every ServiceAccount of the delivery namespace (DeliveryGroup) may do, in the
// tenant's namespace only, what the DeliveryClusterRole grants (an aggregated ClusterRole:
// services that bring kinds charts create extend it through the
// flotilla.dev/aggregate-to-tenant-delivery label), and keep Helm's records in the delivery
// namespace (DeliveryStorageClusterRole). The tenant-controller chart's admission policy
// (AppIdentityPolicy) holds each to its own release: it may create, change and delete only the
// objects helm-controller labels with its HelmRelease (helm.toolkit.fluxcd.io/name and
// /namespace), hooks included, and its own release's records. One app's chart cannot touch
// another app's Service, Secret or volume, even in the same namespace.
const (
	// DeliveryClusterRole is bound to DeliveryGroup in the tenant's namespace.
	DeliveryClusterRole = "flotilla:tenant:delivery"
	// DeliveryStorageClusterRole is bound to DeliveryGroup in the delivery namespace:
	// Helm's release records.
	DeliveryStorageClusterRole = "flotilla:tenant:delivery-storage"
	// DeliveryRoleBinding names both bindings.
	DeliveryRoleBinding = "flotilla-tenant-delivery"
	// LabelAggregateToDelivery on a ClusterRole adds its rules to DeliveryClusterRole.
	LabelAggregateToDelivery = "flotilla.dev/aggregate-to-tenant-delivery"
	// AppIdentityPolicy is the ValidatingAdmissionPolicy that holds each app's identity to the
	// objects of its own release.
	AppIdentityPolicy = "flotilla-app-identity"
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

// DeliveryGroup is the group of every ServiceAccount of a delivery namespace, apps' identities
// included, to which the delivery roles are bound.
func DeliveryGroup(deliveryNamespace string) string {
	return "system:serviceaccounts:" + deliveryNamespace
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
