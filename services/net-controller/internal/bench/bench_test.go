package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/nstest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/routing"
)

func TestMain(m *testing.M) { os.Exit(nstest.Main(m)) }

const (
	entries   = 1000 // rules + routes applied by the agent
	networks  = 500  // tenant networks programmed into OVN
	rounds    = 15   // rounds of the agent's benchmark
	ovnRounds = 3    // rounds of the OVN benchmark
	workers   = 64   // the controller's default --network-concurrency
)

// results collects the sections' lines; the last benchmark writes them.
var results = map[string]string{}

// policy is entries/2 rules, each from its own address to one of the 100 tables, and entries/2
// routes spread over the tables.
func policy() netv1.RoutingPolicy {
	p := netv1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	for i := range entries / 2 {
		p.Spec.Rules = append(p.Spec.Rules, netv1.Rule{Priority: int32(netv1.MinRulePriority + i),
			From: fmt.Sprintf("10.2.%d.%d/32", i/250, i%250+1), Table: int32(netv1.MinTable + i%100)})
		p.Spec.Routes = append(p.Spec.Routes, netv1.Route{Table: int32(netv1.MinTable + i%100),
			Destination: fmt.Sprintf("198.%d.%d.0/24", 18+i/250, i%250), Gateway: "10.2.0.1", Device: "eth2"})
	}
	return p
}

// ipBatch is the same set as `ip -batch` commands.
func ipBatch(p netv1.RoutingPolicy) string {
	var b strings.Builder
	for _, r := range p.Spec.Routes {
		fmt.Fprintf(&b, "route add %s via %s dev %s table %d proto %d\n", r.Destination, r.Gateway, r.Device, r.Table, routing.Protocol)
	}
	for _, r := range p.Spec.Rules {
		fmt.Fprintf(&b, "rule add priority %d from %s table %d protocol %d\n", r.Priority, r.From, r.Table, routing.Protocol)
	}
	return b.String()
}

// runIn runs a command in namespace ns (forked from a thread set to it).
func runIn(b *testing.B, ns netns.NsHandle, name string, args ...string) time.Duration {
	b.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = netns.Set(orig) }()
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", name, err, out)
	}
	return time.Since(start)
}

// BenchmarkAgent: the agent applying 1,000 rules and routes to a fresh namespace, against
// `ip -batch` of the same set in another fresh namespace.
func BenchmarkAgent(b *testing.B) {
	if _, err := exec.LookPath("ip"); err != nil {
		b.Skip("iproute2's ip is the baseline and is not installed")
	}
	p := policy()
	var agents, ips []time.Duration
	var ratios []float64
	var steady int
	// Each figure is small (tens of milliseconds) and the machine is shared: 15 rounds, each
	// the agent then ip -batch, and the median of the rounds' ratios.
	for range b.N * rounds {
		hs := nstest.NewHost(b)
		a := &routing.Applier{H: hs.H}
		start := time.Now()
		n, err := a.Apply(routing.Desired([]netv1.RoutingPolicy{p}, nil, a.Links))
		agent := time.Since(start)
		if err != nil || n != entries {
			b.Fatalf("applied %d of %d: %v", n, entries, err)
		}
		if steady, err = a.Apply(routing.Desired([]netv1.RoutingPolicy{p}, nil, a.Links)); err != nil {
			b.Fatal(err)
		}
		base := nstest.NewHost(b)
		file := filepath.Join(b.TempDir(), "batch")
		if err := os.WriteFile(file, []byte(ipBatch(p)), 0o600); err != nil {
			b.Fatal(err)
		}
		ip := runIn(b, base.NS, "ip", "-batch", file)
		agents, ips, ratios = append(agents, agent), append(ips, ip), append(ratios, float64(agent)/float64(ip))
	}
	ratio := testenv.Median(ratios)
	b.ReportMetric(ratio, "x-ip-batch")
	b.ReportMetric(float64(steady), "writes-at-steady-state")
	results["agent"] = fmt.Sprintf("| node agent: %d rules + routes into a fresh namespace (median of %d rounds) | %s | `ip -batch`: %s | **%.2f×** (goal ≤ 1.2×) | %d |",
		entries, len(ratios), testenv.Median(agents).Round(time.Millisecond), testenv.Median(ips).Round(time.Millisecond), ratio, steady)
}

// nbctlBatch is one ovn-nbctl invocation creating the same rows as the programmer for networks
// 0..n-1 (one transaction).
func nbctlBatch(nets []ovn.Network) []string {
	args := []string{"ls-add", ovn.TransitSwitch}
	for _, n := range nets {
		d := ovn.Desired(n)
		ls, lr := d.Switch.Name, d.Router.Name
		args = append(args,
			"--", "ls-add", ls, "--", "set", "Logical_Switch", ls, "other_config:subnet="+n.CIDR.String(),
			"--", "lsp-add", ls, d.SwitchPort.Name, "--", "lsp-set-type", d.SwitchPort.Name, "router",
			"--", "lsp-set-addresses", d.SwitchPort.Name, "router", "--", "lsp-set-options", d.SwitchPort.Name, "router-port="+d.RouterPort.Name,
			"--", "lr-add", lr, "--", "set", "Logical_Router", lr, "options:chassis="+ovn.GatewayChassis,
			"--", "lrp-add", lr, d.RouterPort.Name, d.RouterPort.MAC, d.RouterPort.Networks[0],
			"--", "lrp-add", lr, d.TransitRouterPort.Name, d.TransitRouterPort.MAC, d.TransitRouterPort.Networks[0],
			"--", "lsp-add", ovn.TransitSwitch, d.TransitSwitchPort.Name, "--", "lsp-set-type", d.TransitSwitchPort.Name, "router",
			"--", "lsp-set-addresses", d.TransitSwitchPort.Name, "router", "--", "lsp-set-options", d.TransitSwitchPort.Name, "router-port="+d.TransitRouterPort.Name,
			"--", "lr-nat-add", lr, "snat", n.Transit.Addr().String(), n.CIDR.String(),
		)
	}
	return args
}

// BenchmarkOVN: the programmer making 500 tenant networks (one transaction each, as the
// controller does), against one ovn-nbctl batch creating the same rows in a second OVN; then the
// transactions a pass over the converged networks sends. Three rounds, each the programmer then
// ovn-nbctl, and the median of the rounds' ratios; the CPU each process spent tells where the
// time went.
func BenchmarkOVN(b *testing.B) {
	var nets []ovn.Network
	for i := range networks {
		nets = append(nets, ovn.Network{Key: fmt.Sprintf("tenant-%d/net", i), CIDR: netip.MustParsePrefix("192.168.0.0/24"),
			Transit: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64, byte(i / 250), byte(i%250 + 2)}), 16), SNAT: true})
	}
	var progs, nbctls []time.Duration
	var ratios []float64
	var progCPU, nbCPU, northdCPU, sbCPU, nbctlCPU, baseNBCPU, baseNorthdCPU time.Duration
	var steady, txnsMade int
	for range b.N * ovnRounds {
		o, err := testenv.StartOVN("")
		if err != nil {
			b.Fatal(err)
		}
		p, err := ovn.Connect(context.Background(), o.NB(), logr.Discard())
		if err != nil {
			b.Fatal(err)
		}
		// As the controller's workers (--network-concurrency) do: that many at a time, sharing transactions.
		cpu0 := ovnCPU(o)
		self0 := selfCPU(syscall.RUSAGE_SELF)
		start := time.Now()
		work := make(chan ovn.Network)
		errs := make(chan error, workers)
		for range workers {
			go func() {
				var first error
				for n := range work {
					if _, err := p.Ensure(context.Background(), ovn.Desired(n)); err != nil && first == nil {
						first = err
					}
				}
				errs <- first
			}()
		}
		for _, n := range nets {
			work <- n
		}
		close(work)
		for range workers {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		prog := time.Since(start)
		progCPU += selfCPU(syscall.RUSAGE_SELF) - self0
		cpu1 := ovnCPU(o)
		nbCPU += cpu1["nb"] - cpu0["nb"]
		northdCPU += cpu1["northd"] - cpu0["northd"]
		sbCPU += cpu1["sb"] - cpu0["sb"]
		txnsMade = p.Transactions()
		before := p.Transactions()
		for _, n := range nets {
			if _, err := p.Ensure(context.Background(), ovn.Desired(n)); err != nil {
				b.Fatal(err)
			}
		}
		steady = p.Transactions() - before
		p.Close()
		_ = o.Stop()

		base, err := testenv.StartOVN("")
		if err != nil {
			b.Fatal(err)
		}
		cpu0 = ovnCPU(base)
		children0 := selfCPU(syscall.RUSAGE_CHILDREN)
		start = time.Now()
		if _, err := base.Nbctl(nbctlBatch(nets)...); err != nil {
			b.Fatal(err)
		}
		nbctl := time.Since(start)
		nbctlCPU += selfCPU(syscall.RUSAGE_CHILDREN) - children0
		cpu1 = ovnCPU(base)
		baseNBCPU += cpu1["nb"] - cpu0["nb"]
		baseNorthdCPU += cpu1["northd"] - cpu0["northd"]
		_ = base.Stop()
		progs, nbctls, ratios = append(progs, prog), append(nbctls, nbctl), append(ratios, float64(prog)/float64(nbctl))
	}
	ratio := testenv.Median(ratios)
	b.ReportMetric(ratio, "x-ovn-nbctl")
	b.ReportMetric(float64(steady), "txns-at-steady-state")
	n := time.Duration(len(ratios))
	ms := func(d time.Duration) string { return (d / n).Round(10 * time.Millisecond).String() }
	results["ovn"] = fmt.Sprintf("| OVN: %d tenant networks (switch, gateway router, 2 router ports, transit port, SNAT) by %d workers, in %d transactions (median of %d rounds) | %s | one `ovn-nbctl` batch: %s | **%.2f×** (goal ≤ 1.5×) | %d transactions |",
		networks, workers, txnsMade, len(ratios), testenv.Median(progs).Round(time.Millisecond), testenv.Median(nbctls).Round(time.Millisecond), ratio, steady)
	results["ovn-cpu"] = fmt.Sprintf("CPU per round of the OVN benchmark (mean of %d): the programmer's process %s, the NB ovsdb-server %s, "+
		"ovn-northd %s and the SB ovsdb-server %s while it ran; ovn-nbctl %s, the NB ovsdb-server %s and ovn-northd %s while the batch ran.",
		len(ratios), ms(progCPU), ms(nbCPU), ms(northdCPU), ms(sbCPU), ms(nbctlCPU), ms(baseNBCPU), ms(baseNorthdCPU))
	writePage(b)
}

// selfCPU is the user and system CPU time of the process (RUSAGE_SELF) or of its ended children.
func selfCPU(who int) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ovnCPU is the CPU time each of o's processes (nb, sb, northd) has spent, from their pid files.
func ovnCPU(o *testenv.OVN) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, name := range []string{"nb", "sb", "northd"} {
		raw, err := os.ReadFile(filepath.Join(o.Dir, name+".pid"))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if st, err := testenv.ProcessStat(pid); err == nil {
			out[name] = st.CPU
		}
	}
	return out
}

func writePage(b *testing.B) {
	out := os.Getenv("BENCH_OUT")
	if out == "" || results["agent"] == "" {
		return
	}
	load, _ := os.ReadFile("/proc/loadavg")
	body := "## net-controller: the node agent and the OVN programmer against the tools\n\n" +
		"Load average when the run ended: " + strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " ") +
		" (the ratios move with it: on a busy machine the baselines, single processes, slow down most). " +
		"Each round runs the controller's side then the baseline, back to back; the times are the medians of the rounds " +
		"and the ratio the median of the rounds' own ratios.\n\n" +
		"| what | net-controller | baseline, same run | ratio | writes at steady state |\n|---|---|---|---|---|\n" +
		results["agent"] + "\n" + results["ovn"] + "\n\n" + results["ovn-cpu"]
	if err := testenv.WriteBenchSection(out, "net-controller", body); err != nil {
		b.Fatal(err)
	}
}
