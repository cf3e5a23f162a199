package noderouting_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/nstest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/routing"
)

// bigPolicy has 64 rules, each to a table of its own, and 4 routes in each table.
func bigPolicy(name, node string) *netv1.RoutingPolicy {
	p := &netv1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.RoutingPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"case": node}},
	}}
	for i := range 64 {
		table := int32(100 + i)
		p.Spec.Rules = append(p.Spec.Rules, netv1.Rule{Priority: int32(11000 + i), From: fmt.Sprintf("10.2.%d.0/24", i), Table: table})
		for j := range 4 {
			p.Spec.Routes = append(p.Spec.Routes, netv1.Route{Table: table, Destination: fmt.Sprintf("198.%d.%d.0/24", 18+j, i), Gateway: "10.2.0.1", Device: "eth2"})
		}
	}
	return p
}

// startAgent runs the real net-agent binary, managing the host's namespace (--netns) as the
// DaemonSet's agent manages its node's.
func startAgent(t *testing.T, bin, kubeconfig, nsPath, node string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "--node-name="+node, "--netns="+nsPath, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	logPath := filepath.Join(t.TempDir(), "agent.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", out)
		}
	})
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// complete checks the invariant the agent keeps at every instant: a rule of its is only there
// when every route of the rule's table is.
func complete(g Gomega, hs *nstest.Host, want routing.Set) {
	rules, err := hs.H.RuleList(netlink.FAMILY_V4)
	g.Expect(err).NotTo(HaveOccurred())
	routesOf := map[int]int{}
	for _, r := range want.Routes {
		routesOf[r.Table]++
	}
	for _, r := range rules {
		if r.Priority < netv1.MinRulePriority || r.Priority > netv1.MaxRulePriority {
			continue
		}
		have, err := hs.H.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: r.Table}, netlink.RT_FILTER_TABLE)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(have).To(HaveLen(routesOf[r.Table]), "rule %d leads to table %d, which is half filled", r.Priority, r.Table)
	}
}

func TestAnAgentKilledMidApplyLeavesNoHalfTableAndConvergesAfterRestart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "net-agent")
	if err := testenv.BuildProgram(ctx, ".", "../../../cmd/agent", bin); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.AdminKubeconfig("net-agent", dir)
	g.Expect(err).NotTo(HaveOccurred())
	hs := nstest.NewHost(t)
	node := "node-crash"
	g.Expect(k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"case": node}}})).To(Succeed())
	p := bigPolicy("node-crash-big", node)
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	want := routing.Desired([]netv1.RoutingPolicy{*p}, map[string]string{"case": node}, (&routing.Applier{H: hs.H}).Links)
	g.Expect(want.Problems).To(BeEmpty())

	// Killed as soon as it has written anything: whatever it managed, no table is half reachable.
	nsPath := hs.Path(t)
	agent := startAgent(t, bin, kubeconfig, nsPath, node)
	g.Eventually(func() int {
		routes, _ := hs.H.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routing.Protocol, Table: 0},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		return len(routes)
	}).WithTimeout(timeout).WithPolling(time.Millisecond).Should(BeNumerically(">", 0))
	g.Expect(agent.Process.Signal(syscall.SIGKILL)).To(Succeed())
	_ = agent.Wait()
	complete(g, hs, want)

	// Restarted, it converges to exactly the policy.
	startAgent(t, bin, kubeconfig, nsPath, node)
	g.Eventually(func(g Gomega) {
		nr := &netv1.NodeRouting{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: node}, nr)).To(Succeed())
		g.Expect(conditions.IsReady(nr)).To(BeTrue(), "%v", nr.Status.Conditions)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	g.Eventually(func() (int, error) { return (&routing.Applier{H: hs.H}).Apply(want) }).WithTimeout(timeout).Should(BeZero())
	complete(g, hs, want)
	rules, err := hs.H.RuleList(netlink.FAMILY_V4)
	g.Expect(err).NotTo(HaveOccurred())
	own := 0
	for _, r := range rules {
		if r.Priority >= netv1.MinRulePriority && r.Priority <= netv1.MaxRulePriority {
			own++
		}
	}
	g.Expect(own).To(Equal(64), "rules after the restart")
	g.Expect(k8s.Delete(ctx, p, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
}
