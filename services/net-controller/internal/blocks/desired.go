package blocks

import (
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// FieldOwner is the field manager of everything the net-controller applies.
const FieldOwner = "net-controller"

// ManagedLabels mark what the net-controller creates; it deletes nothing without them.
var ManagedLabels = map[string]string{"app.kubernetes.io/managed-by": FieldOwner}

// SubnetGVK is Kube-OVN's Subnet kind.
var SubnetGVK = schema.GroupVersionKind{Group: "kubeovn.io", Version: "v1", Kind: "Subnet"}

// Allocation is one tenant namespace's block.
type Allocation struct {
	Pool      string
	Index     int64
	Namespace string
	IPv4      string
	IPv6      string
}

// Allocate computes block i of pool for namespace.
func Allocate(pool Pool, i int64, namespace string) (Allocation, error) {
	a := Allocation{Pool: pool.GetName(), Index: i, Namespace: namespace}
	v4, v6 := pool.Ranges()
	if r := v4; r != nil {
		p, err := Block(r, i)
		if err != nil {
			return a, err
		}
		a.IPv4 = p.String()
	}
	if r := v6; r != nil {
		p, err := Block(r, i)
		if err != nil {
			return a, err
		}
		a.IPv6 = p.String()
	}
	return a, nil
}

// Protocol is Kube-OVN's name for the allocation's address families.
func (a Allocation) Protocol() string {
	switch {
	case a.IPv4 != "" && a.IPv6 != "":
		return "Dual"
	case a.IPv6 != "":
		return "IPv6"
	}
	return "IPv4"
}

// CIDRBlock is Kube-OVN's cidrBlock: the families comma-separated, IPv4 first.
func (a Allocation) CIDRBlock() string {
	var parts []string
	for _, c := range []string{a.IPv4, a.IPv6} {
		if c != "" {
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, ",")
}

// Subnet is the Kube-OVN Subnet holding the allocation, with only the fields the controller owns:
// it is server-side applied as unstructured so that fields Kube-OVN fills in (the gateway, for
// one) are neither written nor claimed. It is an overlay subnet bound to the namespace, with a
// distributed gateway: what Kube-OVN needs to keep a KubeVirt VM's address and MAC across live
// migration (together with its controller's --keep-vm-ip, on by default).
func Subnet(a Allocation) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":        SubnetName(a.Pool, a.Index),
			"labels":      ToAny(SubnetLabels(a)),
			"annotations": map[string]any{netv1.AnnotationBlock: FormatIndex(a.Index)},
		},
		"spec": map[string]any{
			"protocol":    a.Protocol(),
			"cidrBlock":   a.CIDRBlock(),
			"namespaces":  []any{a.Namespace},
			"gatewayType": "distributed",
		},
	}}
	u.SetGroupVersionKind(SubnetGVK)
	return u
}

// SubnetLabels are the labels of the allocation's Subnet.
func SubnetLabels(a Allocation) map[string]string {
	l := map[string]string{netv1.LabelNamespace: a.Namespace, netv1.LabelPool: a.Pool}
	for k, v := range ManagedLabels {
		l[k] = v
	}
	return l
}

// ToAny converts labels to their unstructured form.
func ToAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Addresses says how many addresses the allocation holds, per family ("8", or "8 IPv4, 2^64
// IPv6" for a dual-stack one).
func (a Allocation) Addresses() string {
	var parts []string
	for _, c := range []string{a.IPv4, a.IPv6} {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		bits := p.Addr().BitLen() - p.Bits()
		n := "2^" + strconv.Itoa(bits)
		if bits < 20 {
			n = strconv.Itoa(1 << bits)
		}
		if a.IPv4 != "" && a.IPv6 != "" {
			n += map[bool]string{true: " IPv4", false: " IPv6"}[p.Addr().Is4()]
		}
		parts = append(parts, n)
	}
	return strings.Join(parts, ", ")
}
