// Package metallb builds the MetalLB objects (metallb.io/v1beta1) that give tenants' LoadBalancer
// Services their addresses: an IPAddressPool per tenant block, usable only by the tenant's
// namespace, and an L2Advertisement per LoadBalancerPool announcing its tenants' pools. They are
// pure functions of the allocation and the pool; the controllers server-side apply them as
// unstructured objects, with only the fields the net-controller owns, against MetalLB's published
// CRDs (the tests install them from test/crds/metallb).
package metallb

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/blocks"
)

// GroupVersion is MetalLB's API the controller writes.
var GroupVersion = schema.GroupVersion{Group: "metallb.io", Version: "v1beta1"}

// IPAddressPoolGVK and L2AdvertisementGVK are the kinds the controller writes.
var (
	IPAddressPoolGVK   = GroupVersion.WithKind("IPAddressPool")
	L2AdvertisementGVK = GroupVersion.WithKind("L2Advertisement")
)

// AddressPool is the IPAddressPool holding a tenant namespace's block, in MetalLB's namespace. Its
// name (<pool>-<block>) is the block's claim, as a Kube-OVN Subnet's is for a SubnetPool: the API
// server admits one object of a name, so two allocators cannot hand out one block twice.
// serviceAllocation.namespaces restricts it to the tenant's Services; MetalLB picks it for them
// automatically (autoAssign).
func AddressPool(a blocks.Allocation, namespace string) *unstructured.Unstructured {
	var addrs []any
	for _, c := range []string{a.IPv4, a.IPv6} {
		if c != "" {
			addrs = append(addrs, c)
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":        blocks.SubnetName(a.Pool, a.Index),
			"namespace":   namespace,
			"labels":      blocks.ToAny(blocks.SubnetLabels(a)),
			"annotations": map[string]any{netv1.AnnotationBlock: blocks.FormatIndex(a.Index)},
		},
		"spec": map[string]any{
			"addresses":         addrs,
			"autoAssign":        true,
			"serviceAllocation": map[string]any{"namespaces": []any{a.Namespace}},
		},
	}}
	u.SetGroupVersionKind(IPAddressPoolGVK)
	return u
}

// L2Advertisement announces, from the pool's interfaces (all when none is named), the addresses of
// every IPAddressPool the controller made from the pool: it selects them by label, so tenants come
// and go without a write to it.
func L2Advertisement(pool *netv1.LoadBalancerPool, namespace string) *unstructured.Unstructured {
	spec := map[string]any{
		"ipAddressPoolSelectors": []any{map[string]any{"matchLabels": blocks.ToAny(PoolSelector(pool.Name))}},
	}
	// Always written, empty for every interface, so that dropping the last one is a change.
	ifs := make([]any, 0, len(pool.Spec.Interfaces))
	for _, i := range pool.Spec.Interfaces {
		ifs = append(ifs, i)
	}
	spec["interfaces"] = ifs
	meta := map[string]any{"name": pool.Name, "namespace": namespace, "labels": blocks.ToAny(PoolSelector(pool.Name))}
	if pool.UID != "" {
		// Should the pool go without the controller (its finalizer removed by hand), the garbage
		// collector takes the advertisement with it.
		meta["ownerReferences"] = []any{map[string]any{
			"apiVersion": netv1.GroupVersion.String(), "kind": "LoadBalancerPool",
			"name": pool.Name, "uid": string(pool.UID), "controller": true,
		}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": meta, "spec": spec}}
	u.SetGroupVersionKind(L2AdvertisementGVK)
	return u
}

// PoolSelector are the labels of the controller's objects made for one LoadBalancerPool.
func PoolSelector(pool string) map[string]string {
	l := map[string]string{netv1.LabelPool: pool}
	for k, v := range blocks.ManagedLabels {
		l[k] = v
	}
	return l
}

// Owned reports whether the controller made an object (it carries the controller's labels).
func Owned(labels map[string]string) bool {
	for k, v := range blocks.ManagedLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Meta is an object of kind gvk as a metadata-only cache keeps it (names and labels are what the
// controllers read from their MetalLB objects).
func Meta(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// ListMeta is a metadata-only list of kind gvk.
func ListMeta(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadataList {
	m := &metav1.PartialObjectMetadataList{}
	m.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return m
}

// RoutingPolicyName is the RoutingPolicy derived from a pool's routing.
func RoutingPolicyName(pool string) string { return "lbpool-" + pool }

// RoutingPolicy is the source routing a pool's routing asks for: a rule per CIDR of the pool
// (IPv4 first, priorities counting up from spec.routing.priority) sending traffic from the pool's
// addresses to the pool's table, and a default route per family in that table out of the pool's
// interface. The node agents apply it like any RoutingPolicy; nil when the pool asks for none.
func RoutingPolicy(pool *netv1.LoadBalancerPool) *netv1.RoutingPolicy {
	r := pool.Spec.Routing
	if r == nil {
		return nil
	}
	rp := &netv1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: RoutingPolicyName(pool.Name), Labels: PoolSelector(pool.Name)},
		Spec:       netv1.RoutingPolicySpec{NodeSelector: r.NodeSelector},
	}
	prio := r.Priority
	for _, f := range []struct {
		cidrs   *netv1.BlockRange
		dst, gw string
	}{{pool.Spec.IPv4, "0.0.0.0/0", r.IPv4Gateway}, {pool.Spec.IPv6, "::/0", r.IPv6Gateway}} {
		if f.cidrs == nil {
			continue
		}
		for _, c := range f.cidrs.CIDRs {
			rp.Spec.Rules = append(rp.Spec.Rules, netv1.Rule{Priority: prio, From: c, Table: r.Table})
			prio++
		}
		rp.Spec.Routes = append(rp.Spec.Routes, netv1.Route{Table: r.Table, Destination: f.dst, Gateway: f.gw, Device: r.Interface})
	}
	return rp
}
