package tenancy

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// nameRE is the rule for tenant names: no dashes, because dashes encode the hierarchy.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

const nsPrefix = "tenant-"

// MaxNamespaceLength is the longest namespace name Kubernetes accepts.
const MaxNamespaceLength = 63

// IsRoot reports whether the tenant at key is the root tenant.
func IsRoot(key types.NamespacedName) bool {
	return key.Namespace == tenancyv1.RootNamespace && key.Name == tenancyv1.RootName
}

// OwnNamespace returns the namespace owned by the tenant at key: tenant-root for the root,
// tenant-<name> for a child of the root, <parent namespace>-<name> below that.
func OwnNamespace(key types.NamespacedName) string {
	switch {
	case IsRoot(key):
		return tenancyv1.RootNamespace
	case key.Namespace == tenancyv1.RootNamespace:
		return nsPrefix + key.Name
	default:
		return key.Namespace + "-" + key.Name
	}
}

// OwnerOf returns the tenant that owns namespace ns (and is therefore the parent of the tenants
// living in ns), or false when ns is not a tenant namespace.
func OwnerOf(ns string) (types.NamespacedName, bool) {
	if ns == tenancyv1.RootNamespace {
		return types.NamespacedName{Namespace: tenancyv1.RootNamespace, Name: tenancyv1.RootName}, true
	}
	rest, ok := strings.CutPrefix(ns, nsPrefix)
	if !ok || rest == "" {
		return types.NamespacedName{}, false
	}
	parent := types.NamespacedName{Namespace: tenancyv1.RootNamespace, Name: rest}
	if i := strings.LastIndexByte(rest, '-'); i >= 0 {
		parent = types.NamespacedName{Namespace: nsPrefix + rest[:i], Name: rest[i+1:]}
	}
	if !nameRE.MatchString(parent.Name) || IsRoot(parent) || OwnNamespace(parent) != ns {
		return types.NamespacedName{}, false
	}
	if _, ok := OwnerOf(parent.Namespace); !ok {
		return types.NamespacedName{}, false
	}
	return parent, true
}

// Placement is where a tenant sits in the tree, derived from its name and namespace alone.
type Placement struct {
	// Namespace the tenant owns.
	Namespace string
	// Parent tenant; empty for the root.
	Parent types.NamespacedName
	// Ancestors are the namespaces of all ancestors, root first.
	Ancestors []string
	// Path is dot-separated from the root: root.acme.dev.
	Path string
	// Depth below the root (root is 0).
	Depth int
}

// Place computes a tenant's placement, or says why the tenant cannot exist where it is.
func Place(key types.NamespacedName) (Placement, error) {
	if !nameRE.MatchString(key.Name) {
		return Placement{}, fmt.Errorf("name %q must match %s", key.Name, nameRE)
	}
	if IsRoot(key) {
		return Placement{Namespace: tenancyv1.RootNamespace, Path: tenancyv1.RootName}, nil
	}
	parent, ok := OwnerOf(key.Namespace)
	if !ok {
		return Placement{}, fmt.Errorf("namespace %q is not a tenant namespace: tenants live in %s or in another tenant's namespace",
			key.Namespace, tenancyv1.RootNamespace)
	}
	p := Placement{Namespace: OwnNamespace(key), Parent: parent}
	if len(p.Namespace) > MaxNamespaceLength {
		return Placement{}, fmt.Errorf("the tenant's namespace %q would be %d characters, more than %d: choose a shorter name",
			p.Namespace, len(p.Namespace), MaxNamespaceLength)
	}
	names := []string{key.Name}
	for k, ok := parent, true; ok; k, ok = OwnerOf(k.Namespace) {
		p.Ancestors = append([]string{OwnNamespace(k)}, p.Ancestors...)
		names = append([]string{k.Name}, names...)
		if IsRoot(k) {
			break
		}
	}
	p.Path = strings.Join(names, ".")
	p.Depth = len(names) - 1
	return p, nil
}

// DepthLabel formats a depth for the namespace label.
func DepthLabel(d int) string { return strconv.Itoa(d) }

// Ancestors reads the tenants from the root down to parent. When one of them does not exist it
// returns its key as missing, and no tenants.
func Ancestors(ctx context.Context, r client.Reader, parent types.NamespacedName) (chain []*tenancyv1.Tenant, missing *types.NamespacedName, err error) {
	for k := parent; ; k, _ = OwnerOf(k.Namespace) {
		a := &tenancyv1.Tenant{}
		if err := r.Get(ctx, k, a); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &k, nil
			}
			return nil, nil, err
		}
		chain = append([]*tenancyv1.Tenant{a}, chain...)
		if IsRoot(k) {
			return chain, nil, nil
		}
	}
}

// keyOf is the tenant's object key.
func keyOf(t *tenancyv1.Tenant) types.NamespacedName {
	return types.NamespacedName{Namespace: t.Namespace, Name: t.Name}
}

// Children keeps the tenants of list that are children of the tenant owning their namespace:
// all of them, except the root tenant, which lives in the namespace it owns.
func Children(list []tenancyv1.Tenant) []tenancyv1.Tenant {
	out := list[:0:0]
	for _, t := range list {
		if !IsRoot(keyOf(&t)) {
			out = append(out, t)
		}
	}
	return out
}
