package routing

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// FuzzDesired: any policy (as the CRD admits it, or not) gives rules only in the agent's priority
// range and tables, every one marked as the agent's, and a policy is taken whole or not at all.
func FuzzDesired(f *testing.F) {
	f.Add(int32(10000), "10.2.0.0/24", "eth2", int64(0), int32(100), "0.0.0.0/0", "10.2.0.1", "eth2")
	f.Add(int32(10000), "", "", int64(7), int32(150), "fd00::/64", "fd00::1", "")
	f.Fuzz(func(t *testing.T, prio int32, from, iif string, mark int64, table int32, dst, gw, dev string) {
		if prio < netv1.MinRulePriority || prio > netv1.MaxRulePriority || table < netv1.MinTable || table > netv1.MaxTable {
			return // refused by the CRD
		}
		p := netv1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: netv1.RoutingPolicySpec{
			Rules:  []netv1.Rule{{Priority: prio, From: from, IIF: iif, FWMark: mark, Table: table}},
			Routes: []netv1.Route{{Table: table, Destination: dst, Gateway: gw, Device: dev}},
		}}
		links := func(name string) (int, bool) { return 3, name == "eth2" }
		s := Desired([]netv1.RoutingPolicy{p}, nil, links)
		if len(s.Policies)+len(s.Problems) != 1 {
			t.Fatalf("policy neither applied nor refused: %+v", s)
		}
		if len(s.Problems) == 1 && (len(s.Rules) != 0 || len(s.Routes) != 0) {
			t.Fatalf("a refused policy left entries: %+v", s)
		}
		for _, r := range s.Rules {
			if r.Priority < netv1.MinRulePriority || r.Priority > netv1.MaxRulePriority || r.Table < netv1.MinTable || r.Table > netv1.MaxTable || r.Protocol != Protocol {
				t.Fatalf("rule outside what the agent owns: %+v", r)
			}
		}
		for _, r := range s.Routes {
			if r.Table < netv1.MinTable || r.Table > netv1.MaxTable || r.Protocol != Protocol {
				t.Fatalf("route outside what the agent owns: %+v", r)
			}
		}
	})
}
