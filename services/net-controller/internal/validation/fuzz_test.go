package validation_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// FuzzTenantNetworkAdmission: whatever kube-apiserver admits as a TenantNetwork, the controller
// can act on: the CIDR parses, is canonical IPv4 with a prefix of 8-29, and every floating
// address lies inside it. (Against the real kube-apiserver; its seeds run with the tests.)
func FuzzTenantNetworkAdmission(f *testing.F) {
	for _, seed := range [][2]string{
		{"192.168.0.0/24", "192.168.0.10"}, {"10.0.0.0/8", "10.255.255.254"}, {"192.168.0.1/24", "192.168.0.10"},
		{"::ffff:10.0.0.0/104", "10.0.0.1"}, {"010.0.0.0/8", "10.0.0.1"}, {"10.0.0.0/08", "10.0.0.1"},
		{"10.0.0.0/24", "10.0.1.1"}, {"10.0.0.0/24", "010.0.0.1"}, {"10.0.0.0/24 ", "10.0.0.1"}, {"1.2.3.4/29", "1.2.3.4"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, cidr, internal string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n := &netv1.TenantNetwork{
			ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "default"},
			Spec:       netv1.TenantNetworkSpec{CIDR: cidr, FloatingIPs: []netv1.FloatingIP{{Name: "f", InternalIP: internal}}},
		}
		if err := k8s.Create(ctx, n, client.DryRunAll); err != nil {
			return // refused: fine, whatever it was
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil || !p.Addr().Is4() || p != p.Masked() || p.Bits() < 8 || p.Bits() > 29 {
			t.Fatalf("admitted spec.cidr %q, which the controller cannot use (%v)", cidr, err)
		}
		a, err := netip.ParseAddr(internal)
		if err != nil || !p.Contains(a) {
			t.Fatalf("admitted internalIP %q outside %s (%v)", internal, cidr, err)
		}
	})
}
