package tenancy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		ns, name string
		want     Placement
		err      string
	}{
		{ns: "tenant-root", name: "root", want: Placement{Namespace: "tenant-root", Path: "root"}},
		{ns: "tenant-root", name: "acme", want: Placement{Namespace: "tenant-acme", Path: "root.acme", Depth: 1,
			Parent: types.NamespacedName{Namespace: "tenant-root", Name: "root"}, Ancestors: []string{"tenant-root"}}},
		{ns: "tenant-acme", name: "dev", want: Placement{Namespace: "tenant-acme-dev", Path: "root.acme.dev", Depth: 2,
			Parent: types.NamespacedName{Namespace: "tenant-root", Name: "acme"}, Ancestors: []string{"tenant-root", "tenant-acme"}}},
		{ns: "tenant-acme-dev", name: "x1", want: Placement{Namespace: "tenant-acme-dev-x1", Path: "root.acme.dev.x1", Depth: 3,
			Parent: types.NamespacedName{Namespace: "tenant-acme", Name: "dev"}, Ancestors: []string{"tenant-root", "tenant-acme", "tenant-acme-dev"}}},
		{ns: "default", name: "acme", err: "not a tenant namespace"},
		{ns: "tenant-root-acme", name: "dev", err: "not a tenant namespace"},
		{ns: "tenant-", name: "dev", err: "not a tenant namespace"},
		{ns: "tenant-Acme", name: "dev", err: "not a tenant namespace"},
		{ns: "tenant-root", name: "has-dash", err: "must match"},
		{ns: "tenant-root", name: "9lives", err: "must match"},
		{ns: "tenant-" + strings.Repeat("a", 50), name: strings.Repeat("b", 10), err: "more than 63"},
	} {
		t.Run(tc.ns+"/"+tc.name, func(t *testing.T) {
			got, err := Place(types.NamespacedName{Namespace: tc.ns, Name: tc.name})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOwnerOfInvertsOwnNamespace(t *testing.T) {
	for _, key := range []types.NamespacedName{
		{Namespace: "tenant-root", Name: "root"},
		{Namespace: "tenant-root", Name: "acme"},
		{Namespace: "tenant-acme", Name: "dev"},
		{Namespace: "tenant-acme-dev", Name: "qa"},
	} {
		got, ok := OwnerOf(OwnNamespace(key))
		if !ok || got != key {
			t.Errorf("OwnerOf(OwnNamespace(%s)) = %s, %v", key, got, ok)
		}
	}
}
