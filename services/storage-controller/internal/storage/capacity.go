package storage

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// Node is a LINSTOR node as the capacity computation sees it.
type Node struct {
	Name string
	// Props are the node's LINSTOR properties (Aux/<label> for Kubernetes node labels).
	Props map[string]string
	Pools []Pool
}

// Pool is one storage pool of a node, in KiB as LINSTOR counts.
type Pool struct {
	Name              string
	Diskless          bool
	FreeKiB, TotalKiB int64
}

// Volume is a LINSTOR resource definition and where its replicas are.
type Volume struct {
	Name string
	// Group is the volume's resource group.
	Group    string
	Replicas []Replica
}

// Diskful counts the replicas that hold the data.
func (v Volume) Diskful() int {
	n := 0
	for _, r := range v.Replicas {
		if r.Diskful() {
			n++
		}
	}
	return n
}

// Replica is a volume's resource on one node.
type Replica struct {
	Node string
	// Pool is the storage pool of a diskful replica; empty for a diskless one.
	Pool     string
	UpToDate bool
	InUse    bool
}

// Diskful reports whether the replica holds the data.
func (r Replica) Diskful() bool { return r.Pool != "" }

// Placement is the part of a policy that decides where a volume's replicas go.
type Placement struct {
	Replicas     int
	Pools        []string
	NodeSelector map[string]string
	TopologyKey  string
}

// PlacementOf is p's placement.
func PlacementOf(p *storagepolicyv1.StoragePolicy) Placement {
	return Placement{Replicas: int(p.Spec.Replicas), Pools: p.Spec.StoragePools, NodeSelector: p.Spec.NodeSelector, TopologyKey: p.Spec.TopologyKey}
}

// Candidate is a qualifying storage pool on a node.
type Candidate struct {
	Node, Pool string
	// Topology is the node's value of the placement's topology key.
	Topology          string
	FreeKiB, TotalKiB int64
}

// Capacity is what volumes of a placement can hold.
type Capacity struct {
	// Pools are the qualifying pools, by node then pool.
	Pools []Candidate
	// Domains is the number of distinct failure domains (topology values, or nodes without a
	// topology key) that hold a qualifying pool.
	Domains int
	// LargestKiB is the largest volume one set of replicas can hold: 0 when there are fewer
	// domains than replicas.
	LargestKiB int64
	// Limit is the pool that bounds LargestKiB: the best pool of the last domain a largest
	// replica set needs.
	Limit *Candidate
}

// qualifies reports whether a node may hold a replica: it carries every selected label, and the
// topology key if the placement has one (LINSTOR does not place on a node without it).
func (pl Placement) qualifies(n Node) bool {
	for k, v := range pl.NodeSelector {
		if have, ok := n.Props[AuxPrefix+k]; !ok || have != v {
			return false
		}
	}
	if pl.TopologyKey != "" {
		if _, ok := n.Props[AuxPrefix+pl.TopologyKey]; !ok {
			return false
		}
	}
	return true
}

// Compute is the capacity of pl over nodes. Each replica of a volume is on its own node, in
// its own domain; one replica set can hold as much as the smallest of its replicas' pools, so
// the largest volume is the replicas-th largest of the domains' best pools.
func Compute(nodes []Node, pl Placement) Capacity {
	var c Capacity
	best := map[string]Candidate{} // domain → its pool with the most free space
	for _, n := range nodes {
		if !pl.qualifies(n) {
			continue
		}
		domain := n.Name
		if pl.TopologyKey != "" {
			domain = n.Props[AuxPrefix+pl.TopologyKey]
		}
		for _, p := range n.Pools {
			if p.Diskless || !slices.Contains(pl.Pools, p.Name) {
				continue
			}
			cand := Candidate{Node: n.Name, Pool: p.Name, FreeKiB: p.FreeKiB, TotalKiB: p.TotalKiB}
			if pl.TopologyKey != "" {
				cand.Topology = domain
			}
			c.Pools = append(c.Pools, cand)
			if b, ok := best[domain]; !ok || better(cand, b) {
				best[domain] = cand
			}
		}
	}
	slices.SortFunc(c.Pools, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Pool, b.Pool))
	})
	domains := make([]Candidate, 0, len(best))
	for _, b := range best {
		domains = append(domains, b)
	}
	slices.SortFunc(domains, func(a, b Candidate) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	c.Domains = len(domains)
	if pl.Replicas > 0 && len(domains) >= pl.Replicas {
		limit := domains[pl.Replicas-1]
		c.LargestKiB, c.Limit = limit.FreeKiB, &limit
	}
	return c
}

// better orders candidates by free space, then by name, so that results are deterministic.
func better(a, b Candidate) bool {
	if a.FreeKiB != b.FreeKiB {
		return a.FreeKiB > b.FreeKiB
	}
	return a.Node+"/"+a.Pool < b.Node+"/"+b.Pool
}

// Fits reports whether a volume of sizeKiB fits, and if not, says why with the numbers:
// "2 replicas of 2Ti: the largest free on 2 distinct zones is 1.2Ti (node-3, zone b)".
func (c Capacity) Fits(pl Placement, sizeKiB int64) (bool, string) {
	if c.LargestKiB >= sizeKiB && c.Limit != nil {
		return true, ""
	}
	what := fmt.Sprintf("%d %s of %s", pl.Replicas, plural(pl.Replicas, "replica", "replicas"), HumanKiB(sizeKiB))
	domain := "nodes"
	if pl.TopologyKey != "" {
		domain = shortKey(pl.TopologyKey) + "s"
	}
	if c.Limit == nil {
		return false, what + ": " + c.Shortage(pl)
	}
	where := c.Limit.Node
	if c.Limit.Topology != "" {
		where += ", " + shortKey(pl.TopologyKey) + " " + c.Limit.Topology
	}
	if pl.Replicas == 1 {
		return false, fmt.Sprintf("%s: the largest free is %s (%s)", what, HumanKiB(c.LargestKiB), where)
	}
	return false, fmt.Sprintf("%s: the largest free on %d distinct %s is %s (%s)", what, pl.Replicas, domain, HumanKiB(c.LargestKiB), where)
}

// Shortage says why no replica set fits at all (Limit is nil): "only 1 distinct qualifying zones
// have a storage pool in ssd".
func (c Capacity) Shortage(pl Placement) string {
	domain := "nodes"
	if pl.TopologyKey != "" {
		domain = shortKey(pl.TopologyKey) + "s"
	}
	return fmt.Sprintf("only %d distinct qualifying %s have a storage pool in %s", c.Domains, domain, strings.Join(pl.Pools, ", "))
}

// shortKey is a topology key without its prefix: topology.kubernetes.io/zone → zone.
func shortKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[i+1:]
	}
	return key
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// HumanKiB writes a size in KiB with a binary suffix and at most one decimal: 1.2Ti, 512Mi.
func HumanKiB(kib int64) string {
	units := []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	v, i := float64(kib), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(float64(int64(v*10))/10, 'f', -1, 64)
	return s + units[i]
}

// GrowFits reports whether every diskful replica of vol can grow by deltaKiB in its pool (a
// volume grows in place), and if not, names the replica that cannot.
func GrowFits(nodes []Node, vol Volume, deltaKiB int64) (bool, string) {
	for _, r := range vol.Replicas {
		if !r.Diskful() {
			continue
		}
		free := int64(-1)
		for _, n := range nodes {
			if n.Name != r.Node {
				continue
			}
			for _, p := range n.Pools {
				if p.Name == r.Pool {
					free = p.FreeKiB
				}
			}
		}
		if free < deltaKiB {
			return false, fmt.Sprintf("the replica on %s has %s free in storage pool %s", r.Node, HumanKiB(max(free, 0)), r.Pool)
		}
	}
	return true, ""
}
