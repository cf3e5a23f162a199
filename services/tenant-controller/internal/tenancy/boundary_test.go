package tenancy

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

func TestBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"every user is a system group", IsSystemSubject(rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:authenticated"}), true},
		{"a system user", IsSystemSubject(rbacv1.Subject{Kind: rbacv1.UserKind, Name: "system:kube-scheduler"}), true},
		{"an OIDC group", IsSystemSubject(rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "tenant-acme-admin"}), false},
		{"own namespace", InSubtree("tenant-acme-dev", "tenant-acme-dev"), true},
		{"a descendant's namespace", InSubtree("tenant-acme-dev-qa", "tenant-acme-dev"), true},
		{"a namespace sharing the prefix", InSubtree("tenant-acme-devx", "tenant-acme-dev"), false},
		{"the parent's namespace", InSubtree("tenant-acme", "tenant-acme-dev"), false},
		{"the parent's host", UnderHost("acme.example.org", "acme.example.org"), true},
		{"below the parent's host", UnderHost("shop.dev.acme.example.org", "acme.example.org"), true},
		{"a sibling's host", UnderHost("beta.example.org", "acme.example.org"), false},
		{"a suffix that is not a subdomain", UnderHost("evilacme.example.org", "acme.example.org"), false},
		{"no parent host", UnderHost("acme.example.org", ""), false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
