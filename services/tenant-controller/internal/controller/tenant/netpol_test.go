package tenant_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// node is the test's own model of a tenant tree: the expectations below come from this model,
// not from the policies the controller writes.
type node struct {
	name, parent          string // parent "" is the root
	ingress, monitor, etc bool
}

// TestNetworkIsolationTruthTable builds a depth-4 tree with siblings through the real controller,
// reads back every NetworkPolicy and Namespace from the API server and asks a NetworkPolicy
// evaluation engine (cyclonus' matcher, a model of the Kubernetes NetworkPolicy specification)
// whether each pod may reach each other pod.
func TestNetworkIsolationTruthTable(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t) // provides ingress, monitoring and etcd
	tree := []node{
		{name: "na", parent: "root", etc: true},
		{name: "na1", parent: "na"},
		{name: "na1x", parent: "na1"},
		{name: "na1xq", parent: "na1x"}, // depth 4
		{name: "na2", parent: "na"},
		{name: "nb", parent: "root", monitor: true},
		{name: "nb1", parent: "nb"},
	}
	byName := map[string]node{"root": {name: "root", ingress: true, monitor: true, etc: true}}
	nsOf := map[string]string{"root": "tenant-root"}
	var tenants []*tenancyv1.Tenant
	for _, n := range tree {
		byName[n.name] = n
		nsOf[n.name] = strings.TrimSuffix(nsOf[n.parent], "-root") + "-" + n.name
		if n.parent == "root" {
			nsOf[n.name] = "tenant-" + n.name
		}
		tenants = append(tenants, MakeTenant(n.name, nsOf[n.parent]).Quota("cpu", "1").Quota("count/pods", "10").
			Services(n.ingress, n.monitor, n.etc).Obj())
	}
	// Siblings' quotas must fit their parents: give parents enough.
	for _, tn := range tenants {
		if tn.Name == "na" || tn.Name == "nb" {
			tn.Spec.ResourceQuotas = MakeTenant("", "").Quota("cpu", "10").Quota("count/pods", "100").Obj().Spec.ResourceQuotas
		}
		if tn.Name == "na1" || tn.Name == "na1x" {
			tn.Spec.ResourceQuotas = MakeTenant("", "").Quota("cpu", "3").Quota("count/pods", "30").Obj().Spec.ResourceQuotas
		}
	}
	createAll(ctx, g, tenants...)
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), tenants[0], tenants[5]) })
	eventuallyCurrent(ctx, g, tenants...)
	platform := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-system", Labels: map[string]string{tenancyv1.LabelPlatform: "true"}}}
	g.Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, platform))).To(Succeed())

	// What the API server holds.
	policies := &networkingv1.NetworkPolicyList{}
	g.Expect(k8s.List(ctx, policies)).To(Succeed())
	var nps []*networkingv1.NetworkPolicy
	for i := range policies.Items {
		nps = append(nps, &policies.Items[i])
	}
	engine := matcher.BuildNetworkPolicies(false, nps)
	nsLabels := func(name string) map[string]string {
		ns := &corev1.Namespace{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
		return ns.Labels
	}

	// Pods: a workload in every namespace, plus each shared service in the tenants providing it.
	type pod struct {
		tenant, ns, service string
	}
	var pods []pod
	for name := range byName {
		n := byName[name]
		pods = append(pods, pod{tenant: name, ns: nsOf[name]})
		for svc, on := range map[string]bool{"ingress": n.ingress, "monitoring": n.monitor, "etcd": n.etc} {
			if on {
				pods = append(pods, pod{tenant: name, ns: nsOf[name], service: svc})
			}
		}
	}
	pods = append(pods, pod{ns: "flotilla-system"}, pod{ns: "default"})

	ancestorOrSelf := func(a, b string) bool {
		for x := b; x != ""; x = byName[x].parent {
			if x == a {
				return true
			}
		}
		return false
	}
	provider := func(tenant, svc string) string {
		for x := tenant; x != ""; x = byName[x].parent {
			n := byName[x]
			if (svc == "ingress" && n.ingress) || (svc == "monitoring" && n.monitor) || (svc == "etcd" && n.etc) {
				return x
			}
		}
		return ""
	}
	expect := func(src, dst pod) bool {
		switch {
		case dst.tenant == "": // not a tenant namespace: no isolation
			return true
		case src.ns == "flotilla-system":
			return true
		case src.tenant == "":
			return false
		case ancestorOrSelf(src.tenant, dst.tenant):
			return true
		case ancestorOrSelf(dst.tenant, src.tenant) && dst.tenant != "root": // descendants, but not into the platform's root
			return true
		default:
			return dst.service != "" && provider(src.tenant, dst.service) == dst.tenant
		}
	}

	var wrong []string
	checked := 0
	for _, src := range pods {
		for _, dst := range pods {
			peer := func(p pod) *matcher.TrafficPeer {
				labels := map[string]string{"app": "workload"}
				if p.service != "" {
					labels = map[string]string{tenancyv1.LabelService: p.service}
				}
				return &matcher.TrafficPeer{IP: "192.0.2.1", Internal: &matcher.InternalPeer{
					Namespace: p.ns, NamespaceLabels: nsLabels(p.ns), PodLabels: labels}}
			}
			got := engine.IsTrafficAllowed(&matcher.Traffic{Source: peer(src), Destination: peer(dst),
				ResolvedPort: 443, Protocol: corev1.ProtocolTCP}).IsAllowed()
			checked++
			if got != expect(src, dst) {
				wrong = append(wrong, fmt.Sprintf("%s/%s -> %s/%s: allowed=%v, want %v", src.ns, src.service, dst.ns, dst.service, got, expect(src, dst)))
			}
		}
	}
	t.Logf("checked %d pod pairs over %d namespaces and %d policies", checked, len(byName)+2, len(nps))
	g.Expect(wrong).To(BeEmpty())
	g.Expect(checked).To(BeNumerically(">", 200))
}
