package storage

import (
	"testing"
)

const gi = 1024 * 1024 // KiB

func zoneNode(name, zone string, pools ...Pool) Node {
	return Node{Name: name, Props: map[string]string{"Aux/topology.kubernetes.io/zone": zone, "Aux/disk": "ssd"}, Pools: pools}
}

func TestCompute(t *testing.T) {
	nodes := []Node{
		zoneNode("n1", "a", Pool{Name: "ssd", FreeKiB: 900 * gi, TotalKiB: 1000 * gi}, Pool{Name: "DfltDisklessStorPool", Diskless: true}),
		zoneNode("n2", "a", Pool{Name: "ssd", FreeKiB: 1500 * gi, TotalKiB: 2000 * gi}),
		zoneNode("n3", "b", Pool{Name: "ssd", FreeKiB: 1228 * gi, TotalKiB: 2000 * gi}, Pool{Name: "hdd", FreeKiB: 5000 * gi, TotalKiB: 5000 * gi}),
		{Name: "n4", Props: map[string]string{}, Pools: []Pool{{Name: "ssd", FreeKiB: 4000 * gi}}}, // no zone
	}
	for _, tc := range []struct {
		name    string
		pl      Placement
		largest int64
		limit   string
		domains int
		fits    int64
		msg     string
	}{
		{name: "two zones: the second-best zone bounds", pl: Placement{Replicas: 2, Pools: []string{"ssd"}, TopologyKey: "topology.kubernetes.io/zone"},
			largest: 1228 * gi, limit: "n3", domains: 2, fits: 2048 * gi,
			msg: "2 replicas of 2Ti: the largest free on 2 distinct zones is 1.1Ti (n3, zone b)"},
		{name: "three zones needed, two exist", pl: Placement{Replicas: 3, Pools: []string{"ssd"}, TopologyKey: "topology.kubernetes.io/zone"},
			largest: 0, domains: 2, fits: gi,
			msg: "3 replicas of 1Gi: only 2 distinct qualifying zones have a storage pool in ssd"},
		{name: "no topology: nodes are domains", pl: Placement{Replicas: 2, Pools: []string{"ssd"}},
			largest: 1500 * gi, limit: "n2", domains: 4, fits: 4000 * gi,
			msg: "2 replicas of 3.9Ti: the largest free on 2 distinct nodes is 1.4Ti (n2)"},
		{name: "local", pl: Placement{Replicas: 1, Pools: []string{"hdd", "ssd"}},
			largest: 5000 * gi, limit: "n3", domains: 4, fits: 6000 * gi,
			msg: "1 replica of 5.8Ti: the largest free is 4.8Ti (n3)"},
		{name: "node selector", pl: Placement{Replicas: 1, Pools: []string{"ssd"}, NodeSelector: map[string]string{"disk": "ssd"}},
			largest: 1500 * gi, limit: "n2", domains: 3, fits: 1501 * gi,
			msg: "1 replica of 1.4Ti: the largest free is 1.4Ti (n2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compute(nodes, tc.pl)
			if c.LargestKiB != tc.largest || c.Domains != tc.domains {
				t.Fatalf("largest %d over %d domains, want %d over %d", c.LargestKiB, c.Domains, tc.largest, tc.domains)
			}
			if (c.Limit == nil) != (tc.limit == "") || (c.Limit != nil && c.Limit.Node != tc.limit) {
				t.Fatalf("limit %+v, want %s", c.Limit, tc.limit)
			}
			if ok, _ := c.Fits(tc.pl, tc.largest); tc.largest > 0 && !ok {
				t.Errorf("a volume of exactly the largest size does not fit")
			}
			ok, msg := c.Fits(tc.pl, tc.fits)
			if ok || msg != tc.msg {
				t.Errorf("Fits(%d) = %v, %q; want false, %q", tc.fits, ok, msg, tc.msg)
			}
		})
	}
}

func TestHumanKiB(t *testing.T) {
	for kib, want := range map[int64]string{1: "1Ki", 1024: "1Mi", 1536 * 1024: "1.5Gi", 2 * 1024 * gi: "2Ti", 1023: "1023Ki"} {
		if got := HumanKiB(kib); got != want {
			t.Errorf("HumanKiB(%d) = %s, want %s", kib, got, want)
		}
	}
}
