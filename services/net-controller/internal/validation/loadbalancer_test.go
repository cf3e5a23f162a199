package validation_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

func lbPool(mut func(*netv1.LoadBalancerPool)) *netv1.LoadBalancerPool {
	p := &netv1.LoadBalancerPool{
		ObjectMeta: metav1.ObjectMeta{Name: "public"},
		Spec: netv1.LoadBalancerPoolSpec{
			IPv4:       &netv1.BlockRange{CIDRs: []string{"203.0.113.0/24"}, BlockPrefixLength: 29},
			IPv6:       &netv1.BlockRange{CIDRs: []string{"2001:db8::/112"}, BlockPrefixLength: 120},
			Interfaces: []string{"eth2"},
			Routing:    &netv1.PoolRouting{Interface: "eth2", IPv4Gateway: "203.0.113.1", IPv6Gateway: "2001:db8::1", Table: 150, Priority: 15000},
		},
	}
	mut(p)
	return p
}

func TestLoadBalancerPoolBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*netv1.LoadBalancerPool)
		wants []string
	}{
		{"good", func(*netv1.LoadBalancerPool) {}, nil},
		{"one address per tenant", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.BlockPrefixLength = 32 }, nil},
		{"every interface, routed", func(p *netv1.LoadBalancerPool) { p.Spec.Interfaces = nil }, nil},
		{"no family", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4, p.Spec.IPv6 = nil, nil }, []string{"spec.ipv4, spec.ipv6 or both"}},
		{"bad name", func(p *netv1.LoadBalancerPool) { p.Name = "Public.1" }, []string{"metadata.name"}},
		{"not a CIDR", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.CIDRs = []string{"203.0.113.0"} }, []string{"spec.ipv4.cidrs", "cidrs must hold CIDRs"}},
		{"host bits", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.CIDRs = []string{"203.0.113.1/24"} }, []string{"spec.ipv4.cidrs", "canonical"}},
		{"v6 in ipv4", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.CIDRs = []string{"2001:db8:1::/112"} }, []string{"spec.ipv4.cidrs must be IPv4"}},
		{"v4 in ipv6", func(p *netv1.LoadBalancerPool) { p.Spec.IPv6.CIDRs = []string{"198.51.100.0/24"} }, []string{"spec.ipv6.cidrs must be IPv6"}},
		{"v4 block beyond 32", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.BlockPrefixLength = 33 }, []string{"spec.ipv4.blockPrefixLength must be at most 32"}},
		{"block larger than range", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.BlockPrefixLength = 16 }, []string{"spec.ipv4", "blockPrefixLength must be at least"}},
		{"overlapping CIDRs", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.CIDRs = []string{"203.0.113.0/24", "203.0.113.128/25"} }, []string{"spec.ipv4", "must not overlap"}},
		{"bad interface", func(p *netv1.LoadBalancerPool) { p.Spec.Interfaces = []string{"eth2; reboot"} }, []string{"spec.interfaces[0]"}},
		{"long interface", func(p *netv1.LoadBalancerPool) { p.Spec.Interfaces = []string{strings.Repeat("e", 16)} }, []string{"spec.interfaces[0]", "15"}},
		{"too many interfaces", func(p *netv1.LoadBalancerPool) {
			p.Spec.Interfaces = nil
			for i := range 9 {
				p.Spec.Interfaces = append(p.Spec.Interfaces, fmt.Sprintf("eth%d", i))
			}
			p.Spec.Routing.Interface = "eth0"
		}, []string{"spec.interfaces", "8"}},
		{"routing elsewhere than announced", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.Interface = "eth1" }, []string{"spec.routing.interface must be one of spec.interfaces"}},
		{"routing without interface", func(p *netv1.LoadBalancerPool) { p.Spec.Interfaces, p.Spec.Routing.Interface = nil, "" }, []string{"spec.routing.interface"}},
		{"routing bad interface", func(p *netv1.LoadBalancerPool) { p.Spec.Interfaces, p.Spec.Routing.Interface = nil, "../eth2" }, []string{"spec.routing.interface"}},
		{"kernel's table", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.Table = 254 }, []string{"spec.routing.table", "199"}},
		{"platform's table", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.Table = 10 }, []string{"spec.routing.table", "100"}},
		{"priority below the range", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.Priority = 100 }, []string{"spec.routing.priority", "10000"}},
		{"priority without room", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.Priority = 19990 }, []string{"spec.routing.priority", "19968"}},
		{"v4 gateway not an IP", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.IPv4Gateway = "router" }, []string{"spec.routing.ipv4Gateway must be an IP address"}},
		{"v4 gateway of IPv6", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.IPv4Gateway = "fd00::1" }, []string{"spec.routing.ipv4Gateway must be an IPv4 address"}},
		{"v6 gateway of IPv4", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.IPv6Gateway = "203.0.113.1" }, []string{"spec.routing.ipv6Gateway must be an IPv6 address"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, lbPool(tc.mut), tc.wants...) })
	}
}

func TestLoadBalancerPoolChangesThatWouldMoveHeldBlocksAreRefused(t *testing.T) {
	ctx := ctxFor(t)
	p := lbPool(func(p *netv1.LoadBalancerPool) { p.Name = "lb-append-only" })
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		mut   func(*netv1.LoadBalancerPool)
		wants []string
	}{
		{"append", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.CIDRs = append(p.Spec.IPv4.CIDRs, "198.51.100.0/24") }, nil},
		{"change routing", func(p *netv1.LoadBalancerPool) { p.Spec.Routing.Table = 151 }, nil},
		{"remove", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.CIDRs = []string{"198.51.100.0/24"} }, []string{"spec.ipv4", "only be appended"}},
		{"block size", func(p *netv1.LoadBalancerPool) { p.Spec.IPv4.BlockPrefixLength = 30 }, []string{"spec.ipv4", "blockPrefixLength is immutable"}},
		{"drop a family", func(p *netv1.LoadBalancerPool) { p.Spec.IPv6 = nil }, []string{"spec.ipv4 and spec.ipv6 cannot be added or removed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upd := p.DeepCopy()
			tc.mut(upd)
			updateRefused(t, upd, tc.wants...)
		})
	}
}
