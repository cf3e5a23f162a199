package tenantaddresspool_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ts "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
)

// assigned waits until MetalLB gave the Service a load-balancer address, and returns it.
func assigned(ctx context.Context, g Gomega, ns, name string) netip.Addr {
	svc := &corev1.Service{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, svc)).To(Succeed())
		g.Expect(svc.Status.LoadBalancer.Ingress).NotTo(BeEmpty(), "Service %s/%s has no address", ns, name)
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	return netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
}

// MetalLB's own allocator gives each tenant's LoadBalancer Services addresses from the tenant's
// block, and refuses a tenant that asks for another tenant's pool by name.
func TestMetalLBGivesEachTenantAddressesOnlyFromItsBlock(t *testing.T) {
	g, ctx := NewWithT(t), ts.Ctx(t)
	create(ctx, t, MakePool("real", "real").IPv4(30, "198.51.105.0/28").Obj(),
		ts.TenantNamespace("tenant-real-a", "real"), ts.TenantNamespace("tenant-real-b", "real"))
	a, b := readyPool(ctx, g, "tenant-real-a"), readyPool(ctx, g, "tenant-real-b")

	create(ctx, t, loadBalancer("tenant-real-a", "web"), loadBalancer("tenant-real-b", "web"))
	g.Expect(netip.MustParsePrefix(a.Status.IPv4).Contains(assigned(ctx, g, "tenant-real-a", "web"))).To(BeTrue(), "outside %s", a.Status.IPv4)
	g.Expect(netip.MustParsePrefix(b.Status.IPv4).Contains(assigned(ctx, g, "tenant-real-b", "web"))).To(BeTrue(), "outside %s", b.Status.IPv4)

	// Tenant b names tenant a's pool: MetalLB says no (an event on the Service) and gives nothing.
	steal := loadBalancer("tenant-real-b", "steal")
	steal.Annotations = map[string]string{"metallb.io/address-pool": strings.TrimPrefix(a.Status.AddressPool, metallbNS+"/")}
	create(ctx, t, steal)
	g.Eventually(func(g Gomega) {
		events := &corev1.EventList{}
		g.Expect(k8s.List(ctx, events, client.InNamespace("tenant-real-b"))).To(Succeed())
		var seen []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "steal" {
				seen = append(seen, e.Reason+": "+e.Message)
			}
		}
		g.Expect(seen).To(ContainElement(ContainSubstring("AllocationFailed")))
	}).WithTimeout(ts.Timeout).WithPolling(ts.Interval).Should(Succeed())
	cur := &corev1.Service{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(steal), cur)).To(Succeed())
	g.Expect(cur.Status.LoadBalancer.Ingress).To(BeEmpty(), "tenant b got an address from tenant a's pool")
}
