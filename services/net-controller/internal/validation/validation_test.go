package validation_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

var (
	k8s client.Client
	env *testenv.Env
)

func TestMain(m *testing.M) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	var err error
	env, err = testenv.Start(testenv.Options{
		CRDDirs: []string{filepath.Join("..", "..", "..", "..", "deploy", "charts", "net-controller", "crds")},
		Scheme:  s,
		// Its cluster-role aggregation controller builds the tenant roles.
		ControllerManager: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// refused creates obj with a dry run and checks that kube-apiserver refuses it with every one of
// wants in the message (the field's name, mostly); with no wants, that it admits it.
func refused(t *testing.T, obj client.Object, wants ...string) {
	t.Helper()
	check(t, k8s.Create(ctxFor(t), obj, client.DryRunAll), wants)
}

// check fails the test unless err refuses with every one of wants in its message (or, with no
// wants, is nil).
func check(t *testing.T, err error, wants []string) {
	t.Helper()
	if len(wants) == 0 {
		if err != nil {
			t.Fatalf("refused a good object: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("admitted; want a refusal naming %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
}

// updateRefused updates obj with a dry run and checks the refusal as refused does.
func updateRefused(t *testing.T, obj client.Object, wants ...string) {
	t.Helper()
	check(t, k8s.Update(ctxFor(t), obj, client.DryRunAll), wants)
}

func pool(mut func(*netv1.SubnetPool)) *netv1.SubnetPool {
	p := &netv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: netv1.SubnetPoolSpec{
			IPv4: &netv1.BlockRange{CIDRs: []string{"10.0.0.0/16"}, BlockPrefixLength: 24},
			IPv6: &netv1.BlockRange{CIDRs: []string{"fd00::/48"}, BlockPrefixLength: 64},
		},
	}
	mut(p)
	return p
}

func TestSubnetPoolBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*netv1.SubnetPool)
		wants []string
	}{
		{"good", func(*netv1.SubnetPool) {}, nil},
		{"no family", func(p *netv1.SubnetPool) { p.Spec.IPv4, p.Spec.IPv6 = nil, nil }, []string{"spec.ipv4, spec.ipv6 or both"}},
		{"bad name", func(p *netv1.SubnetPool) { p.Name = "Pool.1" }, []string{"metadata.name"}},
		{"not a CIDR", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = []string{"10.0.0.0"} }, []string{"spec.ipv4.cidrs", "cidrs must hold CIDRs"}},
		{"host bits", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = []string{"10.0.1.0/16"} }, []string{"spec.ipv4.cidrs", "canonical"}},
		{"v6 in ipv4", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = []string{"fd01::/48"} }, []string{"spec.ipv4.cidrs must be IPv4"}},
		{"v4 in ipv6", func(p *netv1.SubnetPool) { p.Spec.IPv6.CIDRs = []string{"10.1.0.0/16"} }, []string{"spec.ipv6.cidrs must be IPv6"}},
		{"block larger than range", func(p *netv1.SubnetPool) { p.Spec.IPv4.BlockPrefixLength = 8 }, []string{"spec.ipv4", "blockPrefixLength must be at least"}},
		{"v4 block too small", func(p *netv1.SubnetPool) { p.Spec.IPv4.BlockPrefixLength = 31 }, []string{"spec.ipv4.blockPrefixLength must be at most 30"}},
		{"v6 block too small", func(p *netv1.SubnetPool) { p.Spec.IPv6.BlockPrefixLength = 126 }, []string{"spec.ipv6.blockPrefixLength must be at most 124"}},
		{"overlapping CIDRs", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = []string{"10.0.0.0/16", "10.0.128.0/17"} }, []string{"spec.ipv4", "must not overlap"}},
		{"empty CIDRs", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = nil }, []string{"spec.ipv4.cidrs"}},
		{"too many CIDRs", func(p *netv1.SubnetPool) {
			p.Spec.IPv4.CIDRs = nil
			for i := range 17 {
				p.Spec.IPv4.CIDRs = append(p.Spec.IPv4.CIDRs, fmt.Sprintf("10.%d.0.0/16", i))
			}
		}, []string{"spec.ipv4.cidrs", "17"}},
		{"long CIDR", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = []string{strings.Repeat("1", 44)} }, []string{"spec.ipv4.cidrs[0]", "43"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, pool(tc.mut), tc.wants...) })
	}
}

func TestSubnetPoolChangesThatWouldMoveHeldBlocksAreRefused(t *testing.T) {
	ctx := ctxFor(t)
	p := pool(func(p *netv1.SubnetPool) {
		p.Name = "append-only"
		p.Spec.IPv4.CIDRs = []string{"10.0.0.0/16", "10.1.0.0/16"}
	})
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		mut   func(*netv1.SubnetPool)
		wants []string
	}{
		{"append", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = append(p.Spec.IPv4.CIDRs, "10.2.0.0/16") }, nil},
		{"remove", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = p.Spec.IPv4.CIDRs[1:] }, []string{"spec.ipv4", "only be appended"}},
		{"reorder", func(p *netv1.SubnetPool) { p.Spec.IPv4.CIDRs = []string{"10.1.0.0/16", "10.0.0.0/16"} }, []string{"spec.ipv4", "only be appended"}},
		{"block size", func(p *netv1.SubnetPool) { p.Spec.IPv4.BlockPrefixLength = 25 }, []string{"spec.ipv4", "blockPrefixLength is immutable"}},
		{"drop a family", func(p *netv1.SubnetPool) { p.Spec.IPv6 = nil }, []string{"spec.ipv4 and spec.ipv6 cannot be added or removed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upd := p.DeepCopy()
			tc.mut(upd)
			updateRefused(t, upd, tc.wants...)
		})
	}
}

func network(mut func(*netv1.TenantNetwork)) *netv1.TenantNetwork {
	n := &netv1.TenantNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "default"},
		Spec: netv1.TenantNetworkSpec{CIDR: "192.168.0.0/24", SNAT: true,
			FloatingIPs: []netv1.FloatingIP{{Name: "web", InternalIP: "192.168.0.10"}}},
	}
	mut(n)
	return n
}

func TestTenantNetworkBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*netv1.TenantNetwork)
		wants []string
	}{
		{"good", func(*netv1.TenantNetwork) {}, nil},
		{"not a CIDR", func(n *netv1.TenantNetwork) { n.Spec.CIDR = "192.168.0.0" }, []string{"spec.cidr must be an IPv4 CIDR"}},
		{"IPv6", func(n *netv1.TenantNetwork) { n.Spec.CIDR = "fd00::/64" }, []string{"spec.cidr must be an IPv4 CIDR"}},
		{"host bits", func(n *netv1.TenantNetwork) { n.Spec.CIDR = "192.168.0.1/24" }, []string{"spec.cidr must be canonical"}},
		{"too wide", func(n *netv1.TenantNetwork) { n.Spec.CIDR = "0.0.0.0/0" }, []string{"spec.cidr must have a prefix length between 8 and 29"}},
		{"too narrow", func(n *netv1.TenantNetwork) { n.Spec.CIDR = "192.168.0.0/30" }, []string{"spec.cidr must have a prefix length between 8 and 29"}},
		{"too long", func(n *netv1.TenantNetwork) { n.Spec.CIDR = strings.Repeat("1", 19) }, []string{"spec.cidr", "18"}},
		{"floating outside", func(n *netv1.TenantNetwork) { n.Spec.FloatingIPs[0].InternalIP = "10.0.0.1" }, []string{"spec.floatingIPs[].internalIP must lie inside spec.cidr"}},
		{"floating not an IP", func(n *netv1.TenantNetwork) { n.Spec.FloatingIPs[0].InternalIP = "web" }, []string{"spec.floatingIPs[].internalIP must be an IPv4 address"}},
		{"floating bad name", func(n *netv1.TenantNetwork) { n.Spec.FloatingIPs[0].Name = "Web_1" }, []string{"spec.floatingIPs[].name must be a DNS label"}},
		{"floating duplicate name", func(n *netv1.TenantNetwork) {
			n.Spec.FloatingIPs = append(n.Spec.FloatingIPs, netv1.FloatingIP{Name: "web", InternalIP: "192.168.0.11"})
		}, []string{"spec.floatingIPs[1]", "Duplicate"}},
		{"too many floating", func(n *netv1.TenantNetwork) {
			n.Spec.FloatingIPs = nil
			for i := range 33 {
				n.Spec.FloatingIPs = append(n.Spec.FloatingIPs, netv1.FloatingIP{Name: fmt.Sprintf("f%d", i), InternalIP: fmt.Sprintf("192.168.0.%d", i+1)})
			}
		}, []string{"spec.floatingIPs", "32"}},
		{"bad name", func(n *netv1.TenantNetwork) { n.Name = "net.1" }, []string{"metadata.name must be a DNS label"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, network(tc.mut), tc.wants...) })
	}
}

func TestTenantNetworkCIDRIsImmutable(t *testing.T) {
	ctx := ctxFor(t)
	n := network(func(n *netv1.TenantNetwork) { n.Name = "fixed" })
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Spec.CIDR, n.Spec.FloatingIPs = "192.168.1.0/24", nil
	if err := k8s.Update(ctx, n, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "spec.cidr is immutable") {
		t.Fatalf("changing spec.cidr: %v, want a refusal naming spec.cidr", err)
	}
}

func policy(mut func(*netv1.RoutingPolicy)) *netv1.RoutingPolicy {
	p := &netv1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "storage"},
		Spec: netv1.RoutingPolicySpec{
			Rules:  []netv1.Rule{{Priority: 10000, From: "10.5.0.0/24", Table: 100}},
			Routes: []netv1.Route{{Table: 100, Destination: "0.0.0.0/0", Gateway: "10.5.0.1", Device: "eth1"}},
		},
	}
	mut(p)
	return p
}

func TestRoutingPolicyBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*netv1.RoutingPolicy)
		wants []string
	}{
		{"good", func(*netv1.RoutingPolicy) {}, nil},
		{"priority below the range", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].Priority = 100 }, []string{"spec.rules[0].priority", "10000"}},
		{"priority above the range", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].Priority = 32766 }, []string{"spec.rules[0].priority", "19999"}},
		{"duplicate priority", func(p *netv1.RoutingPolicy) {
			p.Spec.Rules = append(p.Spec.Rules, netv1.Rule{Priority: 10000, IIF: "eth2", Table: 101})
		}, []string{"spec.rules[].priority must be unique"}},
		{"main table", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].Table = 254 }, []string{"spec.rules[0].table", "199"}},
		{"local table in a route", func(p *netv1.RoutingPolicy) { p.Spec.Routes[0].Table = 255 }, []string{"spec.routes[0].table", "199"}},
		{"rule matching nothing", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].From = "" }, []string{"spec.rules[] must match on from, iif or fwmark"}},
		{"from not a CIDR", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].From = "10.5.0.1" }, []string{"spec.rules[].from must be a CIDR"}},
		{"bad iif", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].IIF = "eth1; reboot" }, []string{"spec.rules[0].iif"}},
		{"long iif", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].IIF = strings.Repeat("e", 16) }, []string{"spec.rules[0].iif", "15"}},
		{"zero fwmark", func(p *netv1.RoutingPolicy) { p.Spec.Rules[0].FWMark = -1 }, []string{"spec.rules[0].fwmark"}},
		{"destination not a CIDR", func(p *netv1.RoutingPolicy) { p.Spec.Routes[0].Destination = "default" }, []string{"spec.routes[].destination must be a CIDR"}},
		{"gateway not an IP", func(p *netv1.RoutingPolicy) { p.Spec.Routes[0].Gateway = "router" }, []string{"spec.routes[].gateway must be an IP address"}},
		{"gateway of another family", func(p *netv1.RoutingPolicy) { p.Spec.Routes[0].Gateway = "fd00::1" }, []string{"spec.routes[].gateway must be of the destination's address family"}},
		{"route going nowhere", func(p *netv1.RoutingPolicy) { p.Spec.Routes[0].Gateway, p.Spec.Routes[0].Device = "", "" }, []string{"spec.routes[] needs a gateway, a device or both"}},
		{"bad device", func(p *netv1.RoutingPolicy) { p.Spec.Routes[0].Device = "../eth1" }, []string{"spec.routes[0].device"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, policy(tc.mut), tc.wants...) })
	}
}
