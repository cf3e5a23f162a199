package linstordouble_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

func replicaSummary(rs []linstordouble.Replica) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		out[r.Node] = r.DiskState
	}
	return out
}

// Auto-diskful as LINSTOR does it: a diskless resource in use for the configured minutes becomes
// diskful and synchronises; with cleanup allowed, an excess replica that is not in use goes once
// the new one is UpToDate, keeping the place count. Replicas spread over zones.
func TestAutoDiskful(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := linstordouble.New(linstordouble.Options{Clock: clk})
	threeZones(d)
	d.AddNode("node-4", map[string]string{"Aux/topology.kubernetes.io/zone": "a"},
		linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 10 * gib, FreeKiB: 10 * gib})
	c, raw, check := serve(t, d.Handler())
	rg := storage.ResourceGroup{Name: "flotilla-ha", Props: map[string]string{
		storage.PropAutoDiskful: "10", storage.PropAutoDiskfulAllowCleanup: "true"},
		Filter: storage.Filter{PlaceCount: 2, StoragePoolList: []string{"ssd"}, ReplicasOnSame: []string{}, ReplicasOnDifferent: []string{"Aux/topology.kubernetes.io/zone"}}}
	if err := c.CreateResourceGroup(ctx, rg); err != nil {
		t.Fatal(err)
	}
	if err := raw.ResourceGroups.Spawn(ctx, "flotilla-ha", lapi.ResourceGroupSpawn{ResourceDefinitionName: "vol", VolumeSizes: []int64{5 * gib}}); err != nil {
		t.Fatal(err)
	}
	placed := replicaSummary(d.Replicas("vol"))
	if len(placed) != 2 || placed["node-4"] != "" {
		t.Fatalf("placed on %v: want two nodes in different zones, the ones with most room", placed)
	}
	var away string
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if placed[n] == "" {
			away = n
		}
	}

	if err := d.SetInUse("vol", away, true); err != nil {
		t.Fatal(err)
	}
	clk.Step(9 * time.Minute)
	d.Step()
	if got := replicaSummary(d.Replicas("vol"))[away]; got != linstordouble.Diskless {
		t.Fatalf("after 9 minutes %s is %s, want still Diskless", away, got)
	}
	clk.Step(time.Minute)
	d.Step()
	if got := replicaSummary(d.Replicas("vol"))[away]; got != linstordouble.Inconsistent {
		t.Fatalf("after 10 minutes %s is %s, want Inconsistent (becoming diskful)", away, got)
	}
	if n := d.UpToDateDiskful()["vol"]; n != 2 {
		t.Fatalf("%d UpToDate replicas while the new one synchronises, want 2", n)
	}
	d.Step()
	after := replicaSummary(d.Replicas("vol"))
	if len(after) != 2 || after[away] != linstordouble.UpToDate {
		t.Fatalf("after synchronising and cleanup: %v; want %s UpToDate and one other replica", after, away)
	}
	if n := d.UpToDateDiskful()["vol"]; n != 2 {
		t.Fatalf("cleanup left %d UpToDate replicas, want the place count 2", n)
	}
	for _, v := range check.Violations() {
		t.Error(v)
	}
}

// A half-applied spawn leaves its resource definition without replicas, as a LINSTOR that failed
// midway does; a half-applied adjust places one of the missing replicas.
func TestHalfApplied(t *testing.T) {
	ctx := context.Background()
	d := linstordouble.New(linstordouble.Options{})
	threeZones(d)
	c, raw, _ := serve(t, d.Handler())
	if err := c.CreateResourceGroup(ctx, storage.ResourceGroup{Name: "flotilla-x", Filter: storage.Filter{PlaceCount: 1, StoragePoolList: []string{"ssd"}}}); err != nil {
		t.Fatal(err)
	}
	d.SetFaults(linstordouble.Faults{HalfApplyRate: 1})
	if err := raw.ResourceGroups.Spawn(ctx, "flotilla-x", lapi.ResourceGroupSpawn{ResourceDefinitionName: "vol", VolumeSizes: []int64{gib}}); err == nil {
		t.Fatal("half-applied spawn succeeded")
	}
	if rs := d.Replicas("vol"); len(rs) != 0 {
		t.Fatalf("half-applied spawn placed %v", rs)
	}
	if _, ok := d.UpToDateDiskful()["vol"]; !ok {
		t.Fatal("half-applied spawn left no resource definition")
	}
	d.SetFaults(linstordouble.Faults{})
	if err := raw.Resources.Autoplace(ctx, "vol", lapi.AutoPlaceRequest{SelectFilter: lapi.AutoSelectFilter{PlaceCount: 1}}); err != nil {
		t.Fatal(err)
	}
	d.SetFaults(linstordouble.Faults{HalfApplyRate: 1})
	grow := storage.Filter{PlaceCount: 3, StoragePoolList: []string{"ssd"}, ReplicasOnSame: []string{}, ReplicasOnDifferent: []string{}}
	if err := c.ModifyResourceGroup(ctx, "flotilla-x", storage.Change{Filter: true, Grow: true}, grow); err == nil {
		t.Fatal("half-applied adjust succeeded")
	}
	if n := len(d.Replicas("vol")); n != 2 {
		t.Fatalf("half-applied adjust: %d replicas, want 2 (one of the two missing)", n)
	}
}

// A listing sent while LINSTOR changes what it lists is a consistent copy: the double writes its
// reply after letting go of its lock, so a reply that shared the maps of a resource group raced a
// modify of that group (the race detector stopped an integration test on it, its test polling
// the group while the controller changed it).
func TestListingWhileModifying(t *testing.T) {
	ctx := context.Background()
	d := linstordouble.New(linstordouble.Options{})
	threeZones(d)
	c, _, check := serve(t, d.Handler())
	filter := storage.Filter{PlaceCount: 1, StoragePoolList: []string{"ssd"}, ReplicasOnSame: []string{}, ReplicasOnDifferent: []string{}}
	if err := c.CreateResourceGroup(ctx, storage.ResourceGroup{Name: "flotilla-busy", Props: map[string]string{storage.PropPolicy: "busy"}, Filter: filter}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				_, _ = c.ResourceGroups(ctx)
			}
		}
	})
	for i := range 200 {
		filter.PlaceCount = int32(i%3 + 1)
		change := storage.Change{Set: map[string]string{"Aux/round": strconv.Itoa(i)}, Filter: true}
		if err := c.ModifyResourceGroup(ctx, "flotilla-busy", change, filter); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	for _, v := range check.Violations() {
		t.Error(v)
	}
}
