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

// DeliveryRoleBinding binds every ServiceAccount of the delivery namespace of tenantNS (each app's
// identity: see tenancyv1.DeliveryGroup) to role in ns: the delivery role in the tenant's
// namespace, the release-record role in the delivery namespace. The tenant-controller chart's
// admission policy holds each identity to its own release's objects.
func DeliveryRoleBinding(ns, tenantNS, role string) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(tenancyv1.DeliveryRoleBinding, ns).WithLabels(ManagedLabels).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(role)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.GroupKind).WithAPIGroup(rbacv1.GroupName).
			WithName(tenancyv1.DeliveryGroup(tenancyv1.DeliveryNamespace(tenantNS))))
}
