package ovn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn/nbdb"
)

// ErrUnavailable: the northbound database cannot be reached (yet); the client reconnects.
var ErrUnavailable = errors.New("OVN northbound database unavailable")

// gatherYields bounds how many times a transaction about to be sent yields to the reconciles the
// previous one released, for their next batches. Yielding lets runnable goroutines build and
// queue theirs; it never sleeps, so a reconcile that does not come back costs microseconds.
const gatherYields = 64

// transactTimeout bounds one Ensure or Remove: the client waits for a reconnection, and its cache
// for consistency, rather than failing, and a dead server must not hold the reconciler forever.
const transactTimeout = 10 * time.Second

// ErrInUse: a network's switch still holds ports that are not the controller's (workloads'); it
// is removed once they are gone, never from under them.
var ErrInUse = errors.New("network still has workload ports")

// Programmer keeps TenantNetworks' rows in the northbound database. It reads from libovsdb's
// cache of the tables it uses (a monitor, kept up to date by the server), so a converged network
// costs no request at all.
type Programmer struct {
	c client.Client

	mu       sync.Mutex
	onChange []func(key string)
	// Transactions counts the transactions sent, for tests and the metric.
	transactions int
	// batches numbers batches, so that their named UUIDs stay apart when merged.
	batches int
	// transitUUID is the transit switch's, once seen.
	transitUUID string
	// queue holds batches waiting for the transaction in flight (inflight) to end: they are sent
	// together, in one transaction (group commit).
	queue    []*pending
	inflight bool
}

// pending is a batch waiting to be committed, and where its outcome goes.
type pending struct {
	ops  []ovsdb.Operation
	done chan error
}

// Connect opens a client to the northbound database at endpoint (unix:… or tcp:…) and monitors
// the tables the controller writes; it reconnects by itself when the server goes away.
func Connect(ctx context.Context, endpoint string, log logr.Logger) (*Programmer, error) {
	dbModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		return nil, err
	}
	// Switch and router names are not indexes of the schema; client indexes on them let a lookup
	// by name cost the same whatever the number of networks.
	byName := []model.ClientIndex{{Columns: []model.ColumnKey{{Column: "name"}}}}
	dbModel.SetIndexes(map[string][]model.ClientIndex{"Logical_Switch": byName, "Logical_Router": byName})
	c, err := client.NewOVSDBClient(dbModel, client.WithEndpoint(endpoint), client.WithLogger(&log),
		client.WithReconnect(5*time.Second, retryForever()))
	if err != nil {
		return nil, err
	}
	p := &Programmer{c: c}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(_ string, m model.Model) { p.changed(m) },
		UpdateFunc: func(_ string, old, m model.Model) { p.changed(old); p.changed(m) },
		DeleteFunc: func(_ string, m model.Model) { p.changed(m) },
	})
	if _, err := c.Monitor(ctx, monitor(c)); err != nil {
		c.Close()
		return nil, err
	}
	if err := p.ensureTransit(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

// monitor watches only the columns the programmer reads (the changed* functions, natKey, names
// and ownership). ovn-northd writes others back into the same rows (a router-type port's `up`,
// for one): monitoring them would decode an update for each, and bring the network back to the
// reconciler for nothing.
func monitor(c client.Client) *client.Monitor {
	ls, lsp := &nbdb.LogicalSwitch{}, &nbdb.LogicalSwitchPort{}
	lr, lrp, nat := &nbdb.LogicalRouter{}, &nbdb.LogicalRouterPort{}, &nbdb.NAT{}
	return c.NewMonitor(
		client.WithTable(ls, &ls.Name, &ls.ExternalIDs, &ls.OtherConfig, &ls.Ports),
		client.WithTable(lsp, &lsp.Name, &lsp.Type, &lsp.Addresses, &lsp.Options, &lsp.ExternalIDs),
		client.WithTable(lr, &lr.Name, &lr.ExternalIDs, &lr.Options, &lr.Ports, &lr.Nat),
		client.WithTable(lrp, &lrp.Name, &lrp.MAC, &lrp.Networks, &lrp.ExternalIDs),
		client.WithTable(nat, &nat.Type, &nat.ExternalIP, &nat.LogicalIP, &nat.ExternalIDs),
	)
}

// ensureTransit creates the transit switch when the database has none, and waits until the cache
// shows it: concurrent Ensures then never race to create it.
func (p *Programmer) ensureTransit(ctx context.Context) error {
	if p.findTransit(ctx) != nil {
		return nil
	}
	b := p.newBatch(ctx)
	guard := &nbdb.LogicalSwitch{Name: TransitSwitch}
	b.absentTransit(guard)
	ops, err := p.c.Create(&nbdb.LogicalSwitch{UUID: b.name(), Name: TransitSwitch, ExternalIDs: map[string]string{OwnerKey: Owner}})
	b.add(ops, err, 1)
	if b.err != nil {
		return b.err
	}
	// Another replica may have made it meanwhile: its guard failing is no error.
	_ = p.transact(ctx, b.ops)
	for p.findTransit(ctx) == nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the transit switch does not show: %w", ErrUnavailable, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Close closes the connection.
func (p *Programmer) Close() { p.c.Close() }

// OnChange registers f to be called with the network key of every row of the controller's that
// changes in the database, whoever changed it: a row deleted or altered by someone else brings
// its network back to the reconciler.
func (p *Programmer) OnChange(f func(key string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onChange = append(p.onChange, f)
}

// Transactions is how many transactions the programmer has sent.
func (p *Programmer) Transactions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.transactions
}

func (p *Programmer) changed(m model.Model) {
	ext := externalIDs(m)
	if ext[OwnerKey] != Owner || ext[NetworkKey] == "" {
		return
	}
	p.mu.Lock()
	fs := slices.Clone(p.onChange)
	p.mu.Unlock()
	for _, f := range fs {
		f(ext[NetworkKey])
	}
}

// Ensure brings the database to want in one transaction and reports how many rows it created,
// changed or dropped (0: nothing was sent).
func (p *Programmer) Ensure(ctx context.Context, want Rows) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, transactTimeout)
	defer cancel()
	if !p.c.Connected() {
		return 0, ErrUnavailable
	}
	b := p.newBatch(ctx)
	lsp := b.port(want.SwitchPort)
	ls := want.Switch
	ls.Ports = []string{lsp}
	b.ensureSwitch(&ls, p.findSwitch(ctx, ls.Name, want.Key), want.Key)

	lrps := []string{b.routerPort(want.RouterPort)}
	if want.TransitRouterPort != nil {
		lrps = append(lrps, b.routerPort(*want.TransitRouterPort))
	}
	var nats []string
	for _, n := range want.NATs {
		nats = append(nats, b.nat(n, want.Key))
	}
	lr := want.Router
	lr.Ports, lr.Nat = lrps, nats
	b.ensureRouter(&lr, p.findRouter(ctx, lr.Name, want.Key), want.Key)

	// The router's port on the transit switch, and none left from an earlier spec.
	var uplink string
	if want.TransitSwitchPort != nil {
		uplink = b.port(*want.TransitSwitchPort)
	}
	transit := p.findTransit(ctx)
	switch {
	case transit == nil && uplink != "":
		guard := &nbdb.LogicalSwitch{Name: TransitSwitch}
		b.absentTransit(guard)
		t := &nbdb.LogicalSwitch{UUID: b.name(), Name: TransitSwitch, ExternalIDs: map[string]string{OwnerKey: Owner}, Ports: []string{uplink}}
		ops, err := p.c.Create(t)
		b.add(ops, err, 1)
		b.solo = true
	case transit != nil:
		if uplink != "" && b.created[uplink] {
			b.mutateTransit(transit.UUID, ovsdb.MutateOperationInsert, []string{uplink})
		}
		if stale := slices.DeleteFunc(p.transitPorts(ctx, want.Key), func(u string) bool { return u == uplink }); len(stale) > 0 {
			b.mutateTransit(transit.UUID, ovsdb.MutateOperationDelete, stale)
		}
	}
	return b.commit(ctx)
}

// Remove deletes a network's rows: its router and switch (their ports and NAT rows go with them,
// OVSDB collects unreferenced rows) and its port on the transit switch. It reports how many rows
// it dropped.
func (p *Programmer) Remove(ctx context.Context, key string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, transactTimeout)
	defer cancel()
	if !p.c.Connected() {
		return 0, ErrUnavailable
	}
	b := p.newBatch(ctx)
	if ls := p.findSwitch(ctx, switchName(key), key); ls != nil {
		if f := p.foreign(ctx, ls.Ports, key, func(u string) model.Model { return &nbdb.LogicalSwitchPort{UUID: u} }); len(f) > 0 {
			return 0, fmt.Errorf("%w: %d on switch %s", ErrInUse, len(f), ls.Name)
		}
		b.delete(ls)
	}
	if lr := p.findRouter(ctx, routerName(key), key); lr != nil {
		b.delete(lr)
	}
	if stale := p.transitPorts(ctx, key); len(stale) > 0 {
		if t := p.findTransit(ctx); t != nil {
			b.mutateTransit(t.UUID, ovsdb.MutateOperationDelete, stale)
		}
	}
	return b.commit(ctx)
}

// owned reports whether external_ids mark a row as the controller's, for network key.
func owned(ext map[string]string, key string) bool {
	return ext[OwnerKey] == Owner && ext[NetworkKey] == key
}

func (p *Programmer) findSwitch(ctx context.Context, name, key string) *nbdb.LogicalSwitch {
	var out []*nbdb.LogicalSwitch
	_ = p.c.Where(&nbdb.LogicalSwitch{Name: name}).List(ctx, &out)
	for _, r := range out {
		if owned(r.ExternalIDs, key) {
			return r
		}
	}
	return nil
}

func (p *Programmer) findRouter(ctx context.Context, name, key string) *nbdb.LogicalRouter {
	var out []*nbdb.LogicalRouter
	_ = p.c.Where(&nbdb.LogicalRouter{Name: name}).List(ctx, &out)
	for _, r := range out {
		if owned(r.ExternalIDs, key) {
			return r
		}
	}
	return nil
}

func (p *Programmer) findTransit(ctx context.Context) *nbdb.LogicalSwitch {
	// The transit switch holds a port per network: reading it (a copy) costs as much as all
	// networks together, so only its UUID is kept, and checked without copying the row.
	p.mu.Lock()
	uuid := p.transitUUID
	p.mu.Unlock()
	if uuid != "" {
		if t := p.c.Cache().Table("Logical_Switch"); t != nil && t.HasRow(uuid) {
			return &nbdb.LogicalSwitch{UUID: uuid, Name: TransitSwitch}
		}
	}
	var out []*nbdb.LogicalSwitch
	_ = p.c.Where(&nbdb.LogicalSwitch{Name: TransitSwitch}).List(ctx, &out)
	for _, r := range out {
		if r.ExternalIDs[OwnerKey] == Owner {
			p.mu.Lock()
			p.transitUUID = r.UUID
			p.mu.Unlock()
			return &nbdb.LogicalSwitch{UUID: r.UUID, Name: TransitSwitch}
		}
	}
	return nil
}

// transitPorts are the UUIDs of the network's ports on the transit switch: the one port of its
// name, looked up by that name (an index), not by walking the switch's ports, which would make
// each network cost as much as all the others together.
func (p *Programmer) transitPorts(ctx context.Context, key string) []string {
	t := p.findTransit(ctx)
	if t == nil {
		return nil
	}
	// A port exists only while a switch refers to it (OVSDB collects the others), and the
	// controller puts this one on the transit switch only.
	lsp := &nbdb.LogicalSwitchPort{Name: transitLSPName(key)}
	if err := p.c.Get(ctx, lsp); err != nil || !owned(lsp.ExternalIDs, key) {
		return nil
	}
	return []string{lsp.UUID}
}

// batch collects the operations of one transaction.
type batch struct {
	ctx context.Context
	p   *Programmer
	// id prefixes the batch's named UUIDs; solo: the batch creates the transit switch, which no
	// other batch of the same transaction may also create.
	id   int
	solo bool
	// created are the named UUIDs of the rows the batch creates.
	created map[string]bool
	ops     []ovsdb.Operation
	rows    int
	err     error
	named   int
}

func (b *batch) add(ops []ovsdb.Operation, err error, rows int) {
	if b.err != nil {
		return
	}
	if err != nil {
		b.err = err
		return
	}
	b.ops = append(b.ops, ops...)
	b.rows += rows
}

func (b *batch) name() string {
	b.named++
	n := fmt.Sprintf("b%d_row%d", b.id, b.named)
	if b.created == nil {
		b.created = map[string]bool{}
	}
	b.created[n] = true
	return n
}

// port returns the UUID of the switch port want, creating or correcting it.
func (b *batch) port(want nbdb.LogicalSwitchPort) string {
	cur := &nbdb.LogicalSwitchPort{Name: want.Name}
	if err := b.p.c.Get(b.ctx, cur); err != nil || !owned(cur.ExternalIDs, want.ExternalIDs[NetworkKey]) {
		want.UUID = b.name()
		ops, err := b.p.c.Create(&want)
		b.add(ops, err, 1)
		return want.UUID
	}
	want.UUID = cur.UUID
	if fields := changedSwitchPort(cur, &want); len(fields) > 0 {
		ops, err := b.p.c.Where(cur).Update(&want, fields...)
		b.add(ops, err, 1)
	}
	return cur.UUID
}

// routerPort returns the UUID of the router port want, creating or correcting it.
func (b *batch) routerPort(want nbdb.LogicalRouterPort) string {
	cur := &nbdb.LogicalRouterPort{Name: want.Name}
	if err := b.p.c.Get(b.ctx, cur); err != nil || !owned(cur.ExternalIDs, want.ExternalIDs[NetworkKey]) {
		want.UUID = b.name()
		ops, err := b.p.c.Create(&want)
		b.add(ops, err, 1)
		return want.UUID
	}
	want.UUID = cur.UUID
	if fields := changedRouterPort(cur, &want); len(fields) > 0 {
		ops, err := b.p.c.Where(cur).Update(&want, fields...)
		b.add(ops, err, 1)
	}
	return cur.UUID
}

// nat returns the UUID of a NAT row like want on the network's router, creating it when missing.
// NAT rows have no name: a row is the same when its type and addresses are.
func (b *batch) nat(want nbdb.NAT, key string) string {
	if lr := b.p.findRouter(b.ctx, routerName(key), key); lr != nil {
		for _, u := range lr.Nat {
			cur := &nbdb.NAT{UUID: u}
			if b.p.c.Get(b.ctx, cur) == nil && owned(cur.ExternalIDs, key) && natKey(*cur) == natKey(want) {
				return u
			}
		}
	}
	want.UUID = b.name()
	ops, err := b.p.c.Create(&want)
	b.add(ops, err, 1)
	return want.UUID
}

// ensureSwitch creates want, or updates the columns of cur that differ. Ports of cur that are not
// the controller's (a workload's, attached by someone else) stay.
func (b *batch) ensureSwitch(want, cur *nbdb.LogicalSwitch, key string) {
	if cur == nil {
		guard := &nbdb.LogicalSwitch{Name: want.Name}
		b.absent(guard, &guard.Name, &guard.ExternalIDs, want.Name, key)
		want.UUID = b.name()
		ops, err := b.p.c.Create(want)
		b.add(ops, err, 1)
		return
	}
	want.UUID = cur.UUID
	want.Ports = append(want.Ports, b.p.foreign(b.ctx, cur.Ports, key, func(u string) model.Model { return &nbdb.LogicalSwitchPort{UUID: u} })...)
	if f := changedSwitch(cur, want); len(f) > 0 {
		ops, err := b.p.c.Where(cur).Update(want, f...)
		b.add(ops, err, 1)
	}
}

// ensureRouter is ensureSwitch for the router, its ports and NAT rows.
func (b *batch) ensureRouter(want, cur *nbdb.LogicalRouter, key string) {
	if cur == nil {
		guard := &nbdb.LogicalRouter{Name: want.Name}
		b.absent(guard, &guard.Name, &guard.ExternalIDs, want.Name, key)
		want.UUID = b.name()
		ops, err := b.p.c.Create(want)
		b.add(ops, err, 1)
		return
	}
	want.UUID = cur.UUID
	want.Ports = append(want.Ports, b.p.foreign(b.ctx, cur.Ports, key, func(u string) model.Model { return &nbdb.LogicalRouterPort{UUID: u} })...)
	want.Nat = append(want.Nat, b.p.foreign(b.ctx, cur.Nat, key, func(u string) model.Model { return &nbdb.NAT{UUID: u} })...)
	if f := changedRouter(cur, want); len(f) > 0 {
		ops, err := b.p.c.Where(cur).Update(want, f...)
		b.add(ops, err, 1)
	}
}

// absent makes the transaction fail unless no row of m's table named name is the network's.
// Switch and router names are not unique in the schema: without this, a transaction whose reply
// was lost (the server died after committing it) and that is sent again would make a second
// router, because the cache did not show the first yet.
func (b *batch) absent(m model.Model, nameField, idsField any, name, key string) {
	timeout := 0
	ops, err := b.p.c.WhereAll(m,
		model.Condition{Field: nameField, Function: ovsdb.ConditionEqual, Value: name},
		model.Condition{Field: idsField, Function: ovsdb.ConditionIncludes, Value: map[string]string{OwnerKey: Owner, NetworkKey: key}},
	).Wait(ovsdb.WaitConditionNotEqual, &timeout, m, nameField)
	b.add(ops, err, 0)
}

// absentTransit makes the transaction fail if the transit switch exists already.
func (b *batch) absentTransit(m *nbdb.LogicalSwitch) {
	timeout := 0
	ops, err := b.p.c.WhereAll(m,
		model.Condition{Field: &m.Name, Function: ovsdb.ConditionEqual, Value: TransitSwitch},
		model.Condition{Field: &m.ExternalIDs, Function: ovsdb.ConditionIncludes, Value: map[string]string{OwnerKey: Owner}},
	).Wait(ovsdb.WaitConditionNotEqual, &timeout, m, &m.Name)
	b.add(ops, err, 0)
}

func (p *Programmer) newBatch(ctx context.Context) *batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches++
	return &batch{ctx: ctx, p: p, id: p.batches}
}

// foreign returns the UUIDs among uuids of rows that are not the controller's for key.
func (p *Programmer) foreign(ctx context.Context, uuids []string, key string, row func(string) model.Model) []string {
	var out []string
	for _, u := range uuids {
		m := row(u)
		if err := p.c.Get(ctx, m); err != nil || !owned(externalIDs(m), key) {
			out = append(out, u)
		}
	}
	return out
}

func externalIDs(m model.Model) map[string]string {
	switch r := m.(type) {
	case *nbdb.LogicalSwitch:
		return r.ExternalIDs
	case *nbdb.LogicalSwitchPort:
		return r.ExternalIDs
	case *nbdb.LogicalRouter:
		return r.ExternalIDs
	case *nbdb.LogicalRouterPort:
		return r.ExternalIDs
	case *nbdb.NAT:
		return r.ExternalIDs
	}
	return nil
}

// mutateTransit inserts ports into, or deletes them from, the transit switch (uuid). The operation
// is written out rather than made by the client's Where(switch).Mutate, which copies the switch
// out of the cache to name it: the transit switch holds a port per network, so every network
// would cost as much as all the others together.
func (b *batch) mutateTransit(uuid string, op ovsdb.Mutator, ports []string) {
	set := make([]any, len(ports))
	for i, u := range ports {
		set[i] = ovsdb.UUID{GoUUID: u} // a named UUID for a port the same transaction creates
	}
	b.add([]ovsdb.Operation{{
		Op:        ovsdb.OperationMutate,
		Table:     nbdb.LogicalSwitchTable,
		Where:     []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: uuid})},
		Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("ports", op, ovsdb.OvsSet{GoSet: set})},
	}}, nil, len(ports))
}

func (b *batch) delete(m model.Model) {
	ops, err := b.p.c.Where(m).Delete()
	b.add(ops, err, 1)
}

// commit sends the batch as one transaction, if it holds anything.
func (b *batch) commit(ctx context.Context) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Reads from the cache wait for it to be consistent and give up when ctx ends (the server is
	// gone): what they did not find may exist, so nothing is sent.
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(b.ops) == 0 {
		return 0, nil
	}
	var err error
	if b.solo {
		err = b.p.transact(ctx, b.ops)
	} else {
		err = b.p.submit(ctx, b.ops)
	}
	if err != nil {
		return 0, err
	}
	return b.rows, nil
}

// submit commits ops with those of the other batches submitted while a transaction is in flight,
// in one transaction (group commit): concurrent reconciles share round trips. Each batch is
// atomic either way.
func (p *Programmer) submit(ctx context.Context, ops []ovsdb.Operation) error {
	pd := &pending{ops: ops, done: make(chan error, 1)}
	p.mu.Lock()
	p.queue = append(p.queue, pd)
	if !p.inflight {
		p.inflight = true
		go p.drain()
	}
	p.mu.Unlock()
	select {
	case err := <-pd.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// drain sends the queued batches, all those waiting at once, until none is left. When a merged
// transaction fails, each of its batches is sent alone: one bad batch must not hold the others.
//
// Before each transaction it yields (gather) to the reconciles the previous one released, whose
// next batches are usually being built: without that, reconciles settle into two groups that
// alternate, one building while the other's transaction is in flight, and send more, smaller
// transactions, each a round trip through ovsdb-server that ovn-northd recomputes after.
func (p *Programmer) drain() {
	released := 0
	for {
		p.gather(released)
		p.mu.Lock()
		q := p.queue
		p.queue = nil
		if len(q) == 0 {
			p.inflight = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		released = len(q)
		ctx, cancel := context.WithTimeout(context.Background(), transactTimeout)
		var all []ovsdb.Operation
		for _, pd := range q {
			all = append(all, pd.ops...)
		}
		err := p.transact(ctx, all)
		if err != nil && len(q) > 1 {
			for _, pd := range q {
				pd.done <- p.transact(ctx, pd.ops)
			}
		} else {
			for _, pd := range q {
				pd.done <- err
			}
		}
		cancel()
	}
}

// gather yields, at most gatherYields times, until the queue holds the released batches besides
// what it holds now.
func (p *Programmer) gather(released int) {
	p.mu.Lock()
	want := len(p.queue) + released
	p.mu.Unlock()
	if released == 0 {
		return
	}
	for range gatherYields {
		p.mu.Lock()
		n := len(p.queue)
		p.mu.Unlock()
		if n >= want {
			return
		}
		runtime.Gosched()
	}
}

// transact sends ops as one transaction and checks every operation's result.
func (p *Programmer) transact(ctx context.Context, ops []ovsdb.Operation) error {
	p.mu.Lock()
	p.transactions++
	p.mu.Unlock()
	res, err := p.c.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("OVN transaction refused: %w", err)
	}
	return nil
}

// The changed* functions name the columns of cur that differ from want's.

func changedSwitch(cur, want *nbdb.LogicalSwitch) []any {
	var f []any
	if !maps.Equal(cur.ExternalIDs, want.ExternalIDs) {
		f = append(f, &want.ExternalIDs)
	}
	if !maps.Equal(cur.OtherConfig, want.OtherConfig) {
		f = append(f, &want.OtherConfig)
	}
	if !sameSet(cur.Ports, want.Ports) {
		f = append(f, &want.Ports)
	}
	return f
}

func changedRouter(cur, want *nbdb.LogicalRouter) []any {
	var f []any
	if !maps.Equal(cur.ExternalIDs, want.ExternalIDs) {
		f = append(f, &want.ExternalIDs)
	}
	if !maps.Equal(cur.Options, want.Options) {
		f = append(f, &want.Options)
	}
	if !sameSet(cur.Ports, want.Ports) {
		f = append(f, &want.Ports)
	}
	if !sameSet(cur.Nat, want.Nat) {
		f = append(f, &want.Nat)
	}
	return f
}

func changedSwitchPort(cur, want *nbdb.LogicalSwitchPort) []any {
	var f []any
	if cur.Type != want.Type {
		f = append(f, &want.Type)
	}
	if !sameSet(cur.Addresses, want.Addresses) {
		f = append(f, &want.Addresses)
	}
	if !maps.Equal(cur.Options, want.Options) {
		f = append(f, &want.Options)
	}
	if !maps.Equal(cur.ExternalIDs, want.ExternalIDs) {
		f = append(f, &want.ExternalIDs)
	}
	return f
}

func changedRouterPort(cur, want *nbdb.LogicalRouterPort) []any {
	var f []any
	if cur.MAC != want.MAC {
		f = append(f, &want.MAC)
	}
	if !sameSet(cur.Networks, want.Networks) {
		f = append(f, &want.Networks)
	}
	if !maps.Equal(cur.ExternalIDs, want.ExternalIDs) {
		f = append(f, &want.ExternalIDs)
	}
	return f
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// retryForever is the reconnection backoff: up to 5 s apart, never giving up (libovsdb panics
// when its backoff gives up).
func retryForever() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0
	return b
}
