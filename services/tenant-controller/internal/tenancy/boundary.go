package tenancy

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// SystemPrefix starts the names of the users and groups Kubernetes itself defines
// (system:authenticated is every user of the cluster, system:serviceaccounts every ServiceAccount).
const SystemPrefix = "system:"

// IsSystemSubject reports whether s is a user or group reserved to Kubernetes: granting a tenant
// role to one grants it to far more than one tenant.
func IsSystemSubject(s rbacv1.Subject) bool {
	return s.Kind != rbacv1.ServiceAccountKind && strings.HasPrefix(s.Name, SystemPrefix)
}

// InSubtree reports whether namespace ns is the tenant namespace own or one of its descendants'.
// Tenant names hold no dashes, so every namespace below own starts with own + "-".
func InSubtree(ns, own string) bool {
	return ns == own || strings.HasPrefix(ns, own+"-")
}

// UnderHost reports whether host is parent or a DNS name below it.
func UnderHost(host, parent string) bool {
	return parent != "" && (host == parent || strings.HasSuffix(host, "."+parent))
}

// RoleRank orders the tenant roles: each grants everything the lower ones do (they aggregate).
func RoleRank(r tenancyv1.TenantRole) int {
	for i, x := range tenancyv1.Roles {
		if x == r {
			return i
		}
	}
	return -1
}

// Grants reports whether access already binds subject s to role r.
func Grants(access []tenancyv1.AccessBinding, r tenancyv1.TenantRole, s rbacv1.Subject) bool {
	for _, a := range access {
		if a.Role != r {
			continue
		}
		for _, x := range a.Subjects {
			if x.Kind == s.Kind && x.Name == s.Name && x.Namespace == s.Namespace {
				return true
			}
		}
	}
	return false
}
