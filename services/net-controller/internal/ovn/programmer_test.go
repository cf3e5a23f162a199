package ovn_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn"
)

// The tests run against a real OVN: NB and SB ovsdb-server and ovn-northd.
var nb *testenv.OVN

func TestMain(m *testing.M) {
	var err error
	if nb, err = testenv.StartOVN(""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = nb.Stop()
	os.Exit(code)
}

func connect(t *testing.T) *ovn.Programmer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := ovn.Connect(ctx, nb.NB(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func network(key, cidr, transit string, floating ...string) ovn.Network {
	n := ovn.Network{Key: key, CIDR: netip.MustParsePrefix(cidr), SNAT: true}
	if transit != "" {
		n.Transit = netip.MustParsePrefix(transit)
	}
	for i := 0; i+1 < len(floating); i += 2 {
		n.Floating = append(n.Floating, ovn.Floating{External: netip.MustParseAddr(floating[i]), Internal: netip.MustParseAddr(floating[i+1])})
	}
	return n
}

func ensure(t *testing.T, p *ovn.Programmer, n ovn.Network) int {
	t.Helper()
	rows, err := p.Ensure(context.Background(), ovn.Desired(n))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// nbctl runs ovn-nbctl and, with --wait=sb, waits until northd has caught up.
func nbctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := nb.Nbctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sbctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := nb.Sbctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTwoTenantsWithOneRangeGetTwoIsolatedRouters(t *testing.T) {
	p := connect(t)
	a := network("tenant-a/net", "192.168.0.0/24", "100.64.0.10/16", "100.64.1.10", "192.168.0.5")
	b := network("tenant-b/net", "192.168.0.0/24", "100.64.0.11/16", "100.64.1.11", "192.168.0.5")
	before := p.Transactions()
	ensure(t, p, a)
	ensure(t, p, b)
	if got := p.Transactions() - before; got != 2 {
		t.Errorf("%d transactions for two new networks, want one each", got)
	}
	nbctl(t, "--wait=sb", "sync")

	for _, n := range []ovn.Network{a, b} {
		lr := ovn.RouterName(n.Key)
		nat := nbctl(t, "lr-nat-list", lr)
		for _, want := range []string{"snat", n.Transit.Addr().String(), "192.168.0.0/24", "dnat_and_snat", n.Floating[0].External.String()} {
			if !strings.Contains(nat, want) {
				t.Errorf("router %s NAT rows lack %q:\n%s", lr, want, nat)
			}
		}
		// northd turned them into the router's NAT and routing flows.
		flows := sbctl(t, "lflow-list", lr)
		for _, want := range []string{
			"ct_snat(" + n.Transit.Addr().String() + ")",
			"ct_dnat(" + n.Floating[0].Internal.String() + ")",
			"ip4.dst == 192.168.0.0/24",
		} {
			if !strings.Contains(flows, want) {
				t.Errorf("router %s has no logical flow with %q", lr, want)
			}
		}
	}

	// A workload of each tenant with the same address; a packet from A's to that address stays in
	// A's network: ovn-trace never shows B's switch, router or port.
	for _, x := range []struct{ key, port, mac string }{{a.Key, "vm-a", "0a:00:00:00:00:0a"}, {b.Key, "vm-b", "0a:00:00:00:00:0b"}} {
		nbctl(t, "lsp-add", ovn.SwitchName(x.key), x.port)
		nbctl(t, "lsp-set-addresses", x.port, x.mac+" 192.168.0.5")
	}
	nbctl(t, "--wait=sb", "sync")
	for _, dst := range []string{"192.168.0.5", "192.168.0.77", "100.64.1.11"} {
		out, err := nb.Trace(ovn.SwitchName(a.Key), fmt.Sprintf(
			`inport == "vm-a" && eth.src == 0a:00:00:00:00:0a && eth.dst == %s && ip4.src == 192.168.0.5 && ip4.dst == %s && ip.ttl == 64`,
			"0a:00:00:00:00:0b", dst))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, ovn.SwitchName(a.Key)) {
			t.Fatalf("ovn-trace did not trace through tenant A's switch:\n%s", out)
		}
		for _, leak := range []string{"vm-b", ovn.SwitchName(b.Key)} {
			if strings.Contains(out, leak) {
				t.Errorf("a packet from tenant A to %s reached %s:\n%s", dst, leak, out)
			}
		}
	}
}

func TestAConvergedNetworkCausesNoTransaction(t *testing.T) {
	p := connect(t)
	n := network("tenant-calm/net", "10.0.0.0/24", "100.64.0.20/16", "100.64.1.20", "10.0.0.9")
	ensure(t, p, n)
	before := p.Transactions()
	for range 3 {
		if rows := ensure(t, p, n); rows != 0 {
			t.Errorf("a converged network changed %d rows", rows)
		}
	}
	if got := p.Transactions() - before; got != 0 {
		t.Errorf("%d transactions at steady state, want 0", got)
	}
}

func TestRowsRemovedOrAlteredBySomeoneElseComeBack(t *testing.T) {
	p := connect(t)
	var mu sync.Mutex
	seen := map[string]bool{}
	p.OnChange(func(key string) { mu.Lock(); seen[key] = true; mu.Unlock() })
	n := network("tenant-fix/net", "10.1.0.0/24", "100.64.0.30/16")
	ensure(t, p, n)
	lr := ovn.RouterName(n.Key)

	nbctl(t, "lr-nat-del", lr, "snat", "10.1.0.0/24")
	nbctl(t, "set", "Logical_Router_Port", "lrp.tenant-fix/net", "mac=\"0a:00:00:00:00:99\"")
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return seen[n.Key] }, "a change event for the network")
	// The programmer's cache has the changes once the event arrived; the next Ensure restores both.
	for !strings.Contains(nbctl(t, "get", "Logical_Router_Port", "lrp.tenant-fix/net", "mac"), "0a:00:00:00:00:99") {
		time.Sleep(10 * time.Millisecond)
	}
	if rows := ensure(t, p, n); rows < 2 {
		t.Errorf("restored %d rows, want the NAT row and the port", rows)
	}
	if nat := nbctl(t, "lr-nat-list", lr); !strings.Contains(nat, "100.64.0.30") {
		t.Errorf("the SNAT row was not restored:\n%s", nat)
	}
	if mac := nbctl(t, "get", "Logical_Router_Port", "lrp.tenant-fix/net", "mac"); strings.Contains(mac, "99") {
		t.Errorf("the port's MAC was not restored: %s", mac)
	}
}

// ovn-northd writes columns back into the controller's rows (a router-type port's `up`); a change
// to a column the programmer does not read reaches neither its cache nor the reconciler.
func TestColumnsTheProgrammerDoesNotReadBringNothingBack(t *testing.T) {
	p := connect(t)
	var mu sync.Mutex
	seen := map[string]int{}
	p.OnChange(func(key string) { mu.Lock(); seen[key]++; mu.Unlock() })
	count := func(key string) int { mu.Lock(); defer mu.Unlock(); return seen[key] }
	// The server sends a client's updates in order: once a sentinel network's rows have come
	// back, every change made before them has too.
	flush := func(i int) {
		s := network(fmt.Sprintf("tenant-sentinel-%d/net", i), "10.3.0.0/24", "")
		ensure(t, p, s)
		waitFor(t, func() bool { return count(s.Key) > 0 }, "the sentinel's change events")
	}
	n := network("tenant-quiet/net", "10.2.0.0/24", "100.64.0.40/16")
	ensure(t, p, n)
	for _, port := range []string{"lsp.tenant-quiet/net", "lsp-transit.tenant-quiet/net"} {
		for !strings.Contains(nbctl(t, "get", "Logical_Switch_Port", port, "up"), "true") {
			time.Sleep(10 * time.Millisecond) // ovn-northd's own write
		}
	}
	flush(1)
	before := count(n.Key)
	nbctl(t, "set", "Logical_Switch_Port", "lsp.tenant-quiet/net", "enabled=true")
	nbctl(t, "set", "Logical_Router_Port", "lrp.tenant-quiet/net", "enabled=true")
	flush(2)
	if got := count(n.Key) - before; got != 0 {
		t.Errorf("%d change events for columns the programmer does not read, want 0", got)
	}
	if rows := ensure(t, p, n); rows != 0 {
		t.Errorf("the network changed %d rows after ovn-northd's and others' writes to other columns, want 0", rows)
	}
}

func TestRowsOfOthersAreNeverTouched(t *testing.T) {
	p := connect(t)
	nbctl(t, "ls-add", "foreign-switch")
	nbctl(t, "lr-add", "lr.tenant-own/net") // someone else's router with the network's router name
	n := network("tenant-own/net", "10.2.0.0/24", "")
	ensure(t, p, n)
	// A workload port someone attached to the network's switch stays, and holds the network.
	nbctl(t, "lsp-add", ovn.SwitchName(n.Key), "vm-own")
	waitFor(t, func() bool {
		rows, err := p.Ensure(context.Background(), ovn.Desired(n))
		return err == nil && rows == 0
	}, "convergence")
	if out := nbctl(t, "lsp-list", ovn.SwitchName(n.Key)); !strings.Contains(out, "vm-own") {
		t.Errorf("the workload's port was dropped:\n%s", out)
	}
	if _, err := p.Remove(context.Background(), n.Key); err == nil || !strings.Contains(err.Error(), "workload ports") {
		t.Errorf("Remove with a workload attached: %v, want ErrInUse", err)
	}
	nbctl(t, "lsp-del", "vm-own")
	waitFor(t, func() bool { _, err := p.Remove(context.Background(), n.Key); return err == nil }, "removal")
	out := nbctl(t, "--bare", "--columns=name", "list", "Logical_Router")
	if !strings.Contains(out, "lr.tenant-own/net") {
		t.Errorf("the foreign router of the same name was deleted:\n%s", out)
	}
	if out := nbctl(t, "ls-list"); !strings.Contains(out, "foreign-switch") || strings.Contains(out, ovn.SwitchName(n.Key)) {
		t.Errorf("after Remove, switches are:\n%s", out)
	}
}

// waitFor polls cond: the programmer's cache follows the database asynchronously.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConcurrentNetworksShareTransactionsAndABadOneHoldsNoOther(t *testing.T) {
	p := connect(t)
	nbctl(t, "ls-add", "foreign-switch-2")
	nbctl(t, "lsp-add", "foreign-switch-2", "lsp.tenant-bad/net") // takes the bad network's port name
	var wg sync.WaitGroup
	errs := make([]error, 21)
	for i := range 21 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("tenant-g%d/net", i)
			if i == 20 {
				key = "tenant-bad/net"
			}
			n := ovn.Network{Key: key, CIDR: netip.MustParsePrefix("10.3.0.0/24"),
				Transit: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 66, 0, byte(i + 2)}), 16), SNAT: true}
			_, errs[i] = p.Ensure(context.Background(), ovn.Desired(n))
		}()
	}
	wg.Wait()
	for i := range 20 {
		if errs[i] != nil {
			t.Errorf("network %d: %v", i, errs[i])
		}
	}
	if errs[20] == nil {
		t.Error("the network whose port name is taken was programmed")
	}
	routers := nbctl(t, "--bare", "--columns=name", "list", "Logical_Router")
	for i := range 20 {
		if c := strings.Count(routers, fmt.Sprintf("lr.tenant-g%d/net\n", i)); c != 1 {
			t.Errorf("network %d has %d routers", i, c)
		}
	}
	if strings.Contains(routers, "lr.tenant-bad/net") {
		t.Error("the refused network left a router")
	}
	if c := strings.Count(nbctl(t, "--bare", "--columns=name", "find", "Logical_Switch", "name=flotilla-transit"), "flotilla-transit"); c != 1 {
		t.Errorf("%d transit switches", c)
	}
}
