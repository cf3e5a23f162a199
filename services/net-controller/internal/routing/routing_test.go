package routing_test

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/nstest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/routing"
)

// The tests run in real network namespaces: as root directly, otherwise inside `unshare -rn`.
func TestMain(m *testing.M) { os.Exit(nstest.Main(m)) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// storagePolicy sends replies from eth2's address out of eth2.
func storagePolicy(name string, prio int32) netv1.RoutingPolicy {
	return netv1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.RoutingPolicySpec{
		Rules:  []netv1.Rule{{Priority: prio, From: "10.2.0.2/32", Table: 100}},
		Routes: []netv1.Route{{Table: 100, Destination: "0.0.0.0/0", Gateway: "10.2.0.1", Device: "eth2"}},
	}}
}

func apply(t *testing.T, a *routing.Applier, policies ...netv1.RoutingPolicy) (routing.Set, int) {
	t.Helper()
	want := routing.Desired(policies, nil, a.Links)
	n, err := a.Apply(want)
	must(t, err)
	return want, n
}

func TestARepliesFromTheSecondInterfaceLeaveThroughIt(t *testing.T) {
	hs := nstest.NewHost(t)
	a := &routing.Applier{H: hs.H}
	if got := hs.OutOf(t, "192.0.2.7", "10.2.0.2"); got != "eth1" {
		t.Fatalf("before the policy, from 10.2.0.2 leaves by %s; the test expects the default route's eth1", got)
	}
	if _, n := apply(t, a, storagePolicy("storage", 10000)); n != 2 {
		t.Errorf("applied %d changes, want a rule and a route", n)
	}
	if got := hs.OutOf(t, "192.0.2.7", "10.2.0.2"); got != "eth2" {
		t.Errorf("from 10.2.0.2 leaves by %s, want eth2", got)
	}
	if got := hs.OutOf(t, "192.0.2.7", "10.1.0.2"); got != "eth1" {
		t.Errorf("from 10.1.0.2 leaves by %s, want eth1", got)
	}
	// A real reply from eth2's address crosses eth2's veth pair, not eth1's.
	rx := hs.Listen(t, "10.2.0.2")
	deadline := time.Now().Add(30 * time.Second)
	for rx.Count("peer2") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no packet from 10.2.0.2 arrived through eth2's pair")
		}
		hs.SendUDP(t, "10.2.0.2", "192.0.2.7", 9)
		time.Sleep(20 * time.Millisecond)
	}
	if n := rx.Count("peer1"); n != 0 {
		t.Errorf("%d packets from 10.2.0.2 left through eth1", n)
	}
	// Converged: nothing more is written, by this applier or by a fresh one (an agent restart).
	if _, n := apply(t, a, storagePolicy("storage", 10000)); n != 0 {
		t.Errorf("a converged node changed %d entries", n)
	}
	if _, n := apply(t, &routing.Applier{H: hs.H}, storagePolicy("storage", 10000)); n != 0 {
		t.Errorf("a restarted agent changed %d entries", n)
	}
	// The policy goes: so do its rule and route.
	if _, n := apply(t, a); n != 2 {
		t.Errorf("removing the policy changed %d entries, want 2", n)
	}
	if got := hs.OutOf(t, "192.0.2.7", "10.2.0.2"); got != "eth1" {
		t.Errorf("after removal, from 10.2.0.2 leaves by %s, want eth1", got)
	}
}

func TestForeignRulesAndRoutesSurvive(t *testing.T) {
	hs := nstest.NewHost(t)
	a := &routing.Applier{H: hs.H}
	eth2, _ := hs.H.LinkByName("eth2")
	_, dst, _ := net.ParseCIDR("198.51.100.0/24")
	foreignRoute := &netlink.Route{Table: 100, Dst: dst, Gw: net.ParseIP("10.2.0.1"), LinkIndex: eth2.Attrs().Index}
	must(t, hs.H.RouteAdd(foreignRoute))
	for _, prio := range []int{500, 25000} {
		r := netlink.NewRule()
		r.Priority, r.Table, r.Mark = prio, 200, 7
		must(t, hs.H.RuleAdd(r))
	}
	apply(t, a, storagePolicy("storage", 10000))
	apply(t, a)
	rules, err := hs.H.RuleList(netlink.FAMILY_V4)
	must(t, err)
	found := map[int]bool{}
	for _, r := range rules {
		found[r.Priority] = true
	}
	if !found[500] || !found[25000] {
		t.Errorf("foreign rules were removed: %v", found)
	}
	routes, err := hs.H.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 100}, netlink.RT_FILTER_TABLE)
	must(t, err)
	if len(routes) != 1 || routes[0].Dst.String() != "198.51.100.0/24" {
		t.Errorf("table 100 holds %v, want only the foreign route", routes)
	}
}

func TestAPolicyThatCannotBeAppliedIsLeftOutWhole(t *testing.T) {
	hs := nstest.NewHost(t)
	a := &routing.Applier{H: hs.H}
	bad := storagePolicy("b-bad-device", 10001)
	bad.Spec.Routes[0].Device = "eth9"
	clash := storagePolicy("c-clash", 10000)
	clash.Spec.Routes[0].Table, clash.Spec.Rules[0].Table = 101, 101
	want, _ := apply(t, a, storagePolicy("a-storage", 10000), bad, clash)
	if len(want.Policies) != 1 || want.Policies[0].Name != "a-storage" {
		t.Errorf("applied %v, want only a-storage", want.Policies)
	}
	if len(want.Problems) != 2 || want.Problems[0].Reason != netv1.UnknownInterfaceReason || want.Problems[1].Reason != netv1.PolicyConflictReason {
		t.Fatalf("problems %+v, want an unknown interface and a conflict", want.Problems)
	}
	if want.Problems[0].Message != "RoutingPolicy b-bad-device: spec.routes[0].device names interface eth9, which the node does not have" {
		t.Errorf("message: %s", want.Problems[0].Message)
	}
	for _, table := range []int{101} {
		routes, err := hs.H.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		must(t, err)
		if len(routes) != 0 {
			t.Errorf("table %d of a refused policy holds %v", table, routes)
		}
	}
}

func TestARuleRemovedBySomeoneElseComesBack(t *testing.T) {
	hs := nstest.NewHost(t)
	a := &routing.Applier{H: hs.H}
	events, stop, err := routing.Watch(hs.NS)
	must(t, err)
	defer stop()
	want, _ := apply(t, a, storagePolicy("storage", 10000))
	// The agent's loop: look again on every change.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-events:
				_, _ = a.Apply(want)
			}
		}
	}()
	r := netlink.NewRule()
	r.Priority, r.Table, r.Family = 10000, 100, netlink.FAMILY_V4
	_, r.Src, _ = net.ParseCIDR("10.2.0.2/32")
	must(t, hs.H.RuleDel(r))
	deadline := time.Now().Add(30 * time.Second)
	for hs.OutOf(t, "192.0.2.7", "10.2.0.2") != "eth2" {
		if time.Now().After(deadline) {
			t.Fatal("the removed rule did not come back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestADeviceRouteWithoutGateway(t *testing.T) {
	hs := nstest.NewHost(t)
	a := &routing.Applier{H: hs.H}
	p := storagePolicy("storage", 10000)
	p.Spec.Routes[0].Gateway = ""
	if _, n := apply(t, a, p); n != 2 {
		t.Fatalf("applied %d changes, want a rule and a route", n)
	}
	if got := hs.OutOf(t, "192.0.2.7", "10.2.0.2"); got != "eth2" {
		t.Errorf("from 10.2.0.2 leaves by %s, want eth2", got)
	}
	if _, n := apply(t, a, p); n != 0 {
		t.Errorf("a converged node changed %d entries", n)
	}
}
