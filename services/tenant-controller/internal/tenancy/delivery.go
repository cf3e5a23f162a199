package tenancy

import (
	rbacv1 "k8s.io/api/rbac/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// DeliveryNamespace is the tenant's delivery namespace (see tenancyv1.DeliveryNamespace), marked
// with the tenant namespace it delivers into and, like the tenant's own, with the UID of the tenant
// it was made for: the controller deletes only what it made.
func DeliveryNamespace(p Placement, ownerUID string) *corev1ac.NamespaceApplyConfiguration {
	labels := map[string]string{tenancyv1.LabelDeliveryFor: p.Namespace}
	for k, v := range ManagedLabels {
		labels[k] = v
	}
	return corev1ac.Namespace(tenancyv1.DeliveryNamespace(p.Namespace)).WithLabels(labels).
		WithAnnotations(map[string]string{tenancyv1.AnnotationOwnerUID: ownerUID})
}

// DeliveryServiceAccount is the identity helm-controller installs the tenant's apps as. Nothing
// runs as it: no token is mounted anywhere.
func DeliveryServiceAccount(deliveryNS string) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(tenancyv1.DeliveryServiceAccount, deliveryNS).WithLabels(ManagedLabels).
		WithAutomountServiceAccountToken(false)
}

// DeliveryRoleBinding binds the delivery identity of the tenant owning tenantNS to role in ns: the
// delivery role in the tenant's namespace, the release-record role in the delivery namespace.
func DeliveryRoleBinding(ns, tenantNS, role string) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(tenancyv1.DeliveryRoleBinding, ns).WithLabels(ManagedLabels).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(role)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).
			WithNamespace(tenancyv1.DeliveryNamespace(tenantNS)).WithName(tenancyv1.DeliveryServiceAccount))
}
