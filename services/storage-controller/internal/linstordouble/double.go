package linstordouble

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// LINSTOR properties the double acts on.
const (
	// PropAutoDiskful is the time in minutes a diskless resource must be DRBD Primary before
	// LINSTOR makes it diskful.
	PropAutoDiskful = "DrbdOptions/auto-diskful"
	// PropAutoDiskfulAllowCleanup lets LINSTOR remove an excess diskful replica afterwards.
	PropAutoDiskfulAllowCleanup = "DrbdOptions/auto-diskful-allow-cleanup"
)

// Disk states of a volume, as DRBD reports them.
const (
	UpToDate     = "UpToDate"
	Inconsistent = "Inconsistent"
	Outdated     = "Outdated"
	Diskless     = "Diskless"
)

// Pool is a storage pool on a node.
type Pool struct {
	Name string
	// Kind is the LINSTOR provider kind: LVM_THIN, LVM, ZFS, …
	Kind     string
	TotalKiB int64
	FreeKiB  int64
}

type node struct {
	name  string
	props map[string]string
	pools map[string]*Pool
}

type resourceGroup struct {
	name, description string
	props             map[string]string
	// filter is the select filter as LINSTOR stores it: the fields it was given, verbatim.
	filter map[string]json.RawMessage
}

type resourceDefinition struct {
	name, group string
	props       map[string]string
	sizeKiB     int64
	created     time.Time
	replicas    map[string]*replica // by node
}

// replica is a resource: the resource definition on one node.
type replica struct {
	pool      string // empty: diskless
	diskState string
	inUse     bool
	inUseAt   time.Time
	created   time.Time
}

func (r *replica) diskful() bool { return r.pool != "" }

// Options configure a Double.
type Options struct {
	// Clock drives auto-diskful; a fake clock makes it deterministic. Defaults to the real one.
	Clock clock.PassiveClock
	// Seed seeds the fault injection.
	Seed uint64
}

// Faults make the double misbehave, each request independently.
type Faults struct {
	// ErrorRate is the fraction of requests answered 500 without doing anything.
	ErrorRate float64
	// DropRate is the fraction of connections closed without an answer.
	DropRate float64
	// DelayRate is the fraction of requests delayed by up to MaxDelay before being handled.
	DelayRate float64
	MaxDelay  time.Duration
	// HalfApplyRate is the fraction of multi-step requests (spawn, adjust, autoplace) that stop
	// with a 500 after their first step.
	HalfApplyRate float64
}

// Double is an in-memory LINSTOR controller. Its zero value is not usable: call New.
type Double struct {
	mu     sync.Mutex
	clock  clock.PassiveClock
	rand   *rand.Rand
	faults Faults

	nodes    map[string]*node
	groups   map[string]*resourceGroup
	defs     map[string]*resourceDefinition
	requests map[string]int // "METHOD pattern" → count
}

// New returns an empty double.
func New(o Options) *Double {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Double{
		clock:    o.Clock,
		rand:     rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		nodes:    map[string]*node{},
		groups:   map[string]*resourceGroup{},
		defs:     map[string]*resourceDefinition{},
		requests: map[string]int{},
	}
}

// SetFaults replaces the faults injected from now on.
func (d *Double) SetFaults(f Faults) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = f
}

// AddNode adds a satellite with properties (Aux/topology.kubernetes.io/zone, …) and pools.
func (d *Double) AddNode(name string, props map[string]string, pools ...Pool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := &node{name: name, props: maps.Clone(props), pools: map[string]*Pool{}}
	if n.props == nil {
		n.props = map[string]string{}
	}
	for _, p := range pools {
		n.pools[p.Name] = &p
	}
	d.nodes[name] = n
}

// SetFree sets a pool's free capacity, as if something outside LINSTOR used or freed space.
func (d *Double) SetFree(nodeName, pool string, freeKiB int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.pool(nodeName, pool)
	if err != nil {
		return err
	}
	p.FreeKiB = freeKiB
	return nil
}

func (d *Double) pool(nodeName, pool string) (*Pool, error) {
	n, ok := d.nodes[nodeName]
	if !ok {
		return nil, fmt.Errorf("node %q not found", nodeName)
	}
	p, ok := n.pools[pool]
	if !ok {
		return nil, fmt.Errorf("storage pool %q not found on node %q", pool, nodeName)
	}
	return p, nil
}

// SetInUse marks the resource of definition rd on node as DRBD Primary (a pod uses the volume
// there) or not, as the CSI driver's attach and the kernel would. A node without a resource gets
// a diskless one first.
func (d *Double) SetInUse(rd, nodeName string, inUse bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	def, ok := d.defs[rd]
	if !ok {
		return fmt.Errorf("resource definition %q not found", rd)
	}
	if _, ok := d.nodes[nodeName]; !ok {
		return fmt.Errorf("node %q not found", nodeName)
	}
	r, ok := def.replicas[nodeName]
	if !ok {
		r = &replica{diskState: Diskless, created: d.clock.Now()}
		def.replicas[nodeName] = r
	}
	if r.inUse != inUse {
		r.inUse, r.inUseAt = inUse, d.clock.Now()
	}
	return nil
}

// Replica is one resource as the double holds it, for assertions.
type Replica struct {
	Node, Pool, DiskState string
	InUse                 bool
}

// Replicas returns the resources of rd, by node name.
func (d *Double) Replicas(rd string) []Replica {
	d.mu.Lock()
	defer d.mu.Unlock()
	def, ok := d.defs[rd]
	if !ok {
		return nil
	}
	var out []Replica
	for _, n := range slices.Sorted(maps.Keys(def.replicas)) {
		r := def.replicas[n]
		out = append(out, Replica{Node: n, Pool: r.pool, DiskState: r.diskState, InUse: r.inUse})
	}
	return out
}

// UpToDateDiskful counts, for every resource definition, its UpToDate diskful resources: what
// must never drop to zero once a volume held data.
func (d *Double) UpToDateDiskful() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for name, def := range d.defs {
		out[name] = 0
		for _, r := range def.replicas {
			if r.diskful() && r.diskState == UpToDate {
				out[name]++
			}
		}
	}
	return out
}

// Requests returns how many requests each route received ("PUT /v1/resource-groups/{rg}").
func (d *Double) Requests() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.requests)
}

// Writes counts the requests that were not GETs.
func (d *Double) Writes() int {
	n := 0
	for k, v := range d.Requests() {
		if len(k) < 4 || k[:4] != "GET " {
			n += v
		}
	}
	return n
}

// Step runs LINSTOR's periodic work at the clock's current time: a resynchronising replica
// becomes UpToDate; a diskless resource in use for the auto-diskful time becomes diskful; with
// cleanup allowed, an excess diskful replica that is not in use is removed once every other
// replica is UpToDate, never below the resource group's place count.
func (d *Double) Step() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	for _, name := range slices.Sorted(maps.Keys(d.defs)) {
		def := d.defs[name]
		for _, r := range def.replicas {
			if r.diskful() && r.diskState == Inconsistent {
				r.diskState = UpToDate
			}
		}
		minutes, err := d.intProp(def, PropAutoDiskful)
		if err != nil || minutes <= 0 {
			continue
		}
		for _, nodeName := range slices.Sorted(maps.Keys(def.replicas)) {
			r := def.replicas[nodeName]
			if r.diskful() || !r.inUse || now.Sub(r.inUseAt) < time.Duration(minutes)*time.Minute {
				continue
			}
			if pool := d.poolFor(def, d.nodes[nodeName]); pool != nil {
				pool.FreeKiB -= def.sizeKiB
				r.pool, r.diskState = pool.Name, Inconsistent
			}
		}
		if d.prop(def, PropAutoDiskfulAllowCleanup) == "true" {
			d.cleanup(def)
		}
	}
}

// cleanup removes excess diskful replicas that are not in use while every diskful replica is
// UpToDate, keeping at least the place count (and always one).
func (d *Double) cleanup(def *resourceDefinition) {
	keep := max(1, d.placeCount(def))
	var upToDate []string
	for _, n := range slices.Sorted(maps.Keys(def.replicas)) {
		r := def.replicas[n]
		if r.diskful() && r.diskState != UpToDate {
			return // still synchronising: nothing is excess yet
		}
		if r.diskful() {
			upToDate = append(upToDate, n)
		}
	}
	for i := len(upToDate) - 1; i >= 0 && len(upToDate) > keep; i-- {
		r := def.replicas[upToDate[i]]
		if r.inUse {
			continue
		}
		d.nodes[upToDate[i]].pools[r.pool].FreeKiB += def.sizeKiB
		delete(def.replicas, upToDate[i])
		upToDate = slices.Delete(upToDate, i, i+1)
	}
}

// prop is a property's effective value: the resource definition's, else its group's.
func (d *Double) prop(def *resourceDefinition, key string) string {
	if v, ok := def.props[key]; ok {
		return v
	}
	if g, ok := d.groups[def.group]; ok {
		return g.props[key]
	}
	return ""
}

func (d *Double) intProp(def *resourceDefinition, key string) (int, error) {
	v := d.prop(def, key)
	if v == "" {
		return 0, nil
	}
	var n int
	_, err := fmt.Sscanf(v, "%d", &n)
	return n, err
}

func (d *Double) placeCount(def *resourceDefinition) int {
	if g, ok := d.groups[def.group]; ok {
		return int(g.selectFilter().PlaceCount)
	}
	return 0
}

// selectFilter is the typed view of the fields of a select filter the double places by.
type selectFilter struct {
	PlaceCount          int32    `json:"place_count,omitempty"`
	NodeNameList        []string `json:"node_name_list,omitempty"`
	StoragePool         string   `json:"storage_pool,omitempty"`
	StoragePoolList     []string `json:"storage_pool_list,omitempty"`
	ReplicasOnSame      []string `json:"replicas_on_same,omitempty"`
	ReplicasOnDifferent []string `json:"replicas_on_different,omitempty"`
	DisklessOnRemaining bool     `json:"diskless_on_remaining,omitempty"`
}

func decodeFilter(raw map[string]json.RawMessage) selectFilter {
	var f selectFilter
	b, _ := json.Marshal(raw)
	_ = json.Unmarshal(b, &f)
	return f
}

func (g *resourceGroup) selectFilter() selectFilter { return decodeFilter(g.filter) }

// pools is the filter's storage pools: storage_pool_list, else storage_pool, else any.
func (f selectFilter) pools() []string {
	if len(f.StoragePoolList) > 0 {
		return f.StoragePoolList
	}
	if f.StoragePool != "" {
		return []string{f.StoragePool}
	}
	return nil
}

// qualifies reports whether node n may hold a replica under f.
func (f selectFilter) qualifies(n *node) bool {
	if len(f.NodeNameList) > 0 && !slices.Contains(f.NodeNameList, n.name) {
		return false
	}
	for _, same := range f.ReplicasOnSame {
		key, want, hasValue := cut(same)
		if v, ok := n.props[key]; !ok || (hasValue && v != want) {
			return false
		}
	}
	return true
}

func cut(kv string) (string, string, bool) {
	for i := range len(kv) {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// poolFor picks the qualifying pool of n with the most free space that holds def, or nil.
func (d *Double) poolFor(def *resourceDefinition, n *node) *Pool {
	var f selectFilter
	if g, ok := d.groups[def.group]; ok {
		f = g.selectFilter()
	}
	if n == nil || !f.qualifies(n) {
		return nil
	}
	var best *Pool
	for _, name := range slices.Sorted(maps.Keys(n.pools)) {
		p := n.pools[name]
		if wanted := f.pools(); wanted != nil && !slices.Contains(wanted, name) {
			continue
		}
		if p.Kind == "DISKLESS" || p.FreeKiB < def.sizeKiB {
			continue
		}
		if best == nil || p.FreeKiB > best.FreeKiB {
			best = p
		}
	}
	return best
}

// autoplace adds diskful replicas to def until it has f's place count, on qualifying nodes with
// room, each on a different value of every replicas_on_different property than the others; most
// free space first (LINSTOR's default MaxFreeSpace strategy). half stops after the first replica.
func (d *Double) autoplace(def *resourceDefinition, f selectFilter, half bool) error {
	have := 0
	taken := map[string]map[string]bool{} // property → values already used
	for _, key := range f.ReplicasOnDifferent {
		taken[key] = map[string]bool{}
	}
	for n, r := range def.replicas {
		if !r.diskful() {
			continue
		}
		have++
		for key := range taken {
			taken[key][d.nodes[n].props[key]] = true
		}
	}
	type candidate struct {
		node *node
		pool *Pool
	}
	var cands []candidate
	for _, n := range d.nodes {
		if r, ok := def.replicas[n.name]; ok && r.diskful() {
			continue
		}
		if p := d.poolFor(&resourceDefinition{group: def.group, sizeKiB: def.sizeKiB}, n); p != nil && f.qualifies(n) {
			cands = append(cands, candidate{n, p})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].pool.FreeKiB != cands[j].pool.FreeKiB {
			return cands[i].pool.FreeKiB > cands[j].pool.FreeKiB
		}
		return cands[i].node.name < cands[j].node.name
	})
	// A new volume's replicas start UpToDate (there is nothing to synchronise); a replica added
	// to a volume that holds data synchronises first.
	fresh := have == 0
	placed := 0
	for _, c := range cands {
		if have >= int(f.PlaceCount) {
			break
		}
		if placed > 0 && half {
			return errHalfApplied
		}
		clash := false
		for key, used := range taken {
			v, ok := c.node.props[key]
			if !ok || used[v] {
				clash = true
			}
		}
		if clash {
			continue
		}
		for key := range taken {
			taken[key][c.node.props[key]] = true
		}
		c.pool.FreeKiB -= def.sizeKiB
		if r, ok := def.replicas[c.node.name]; ok { // a diskless resource becomes diskful
			r.pool, r.diskState = c.pool.Name, Inconsistent
		} else {
			state := Inconsistent
			if fresh {
				state = UpToDate
			}
			def.replicas[c.node.name] = &replica{pool: c.pool.Name, diskState: state, created: d.clock.Now()}
		}
		have++
		placed++
	}
	if have < int(f.PlaceCount) {
		return fmt.Errorf("not enough available nodes: %d of %d replicas placed", have, f.PlaceCount)
	}
	return nil
}

var errHalfApplied = fmt.Errorf("injected fault: stopped after the first step")
