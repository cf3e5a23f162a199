package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
)

// With LINSTOR failing, dropping, delaying and half-applying requests at random while the policy
// changes and auto-diskful moves replicas, no volume ever loses its last UpToDate diskful replica;
// once LINSTOR behaves, the policy converges: its resource group as the spec says, and every
// volume with the policy's number of replicas.
func TestFaultsNeverLoseTheLastReplicaAndConverge(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	p := replicated("chaos")
	p.Spec.AutoDiskful.After = &metav1.Duration{Duration: time.Minute}
	create(t, p)
	condition(t, "chaos", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	var volumes []string
	for i := range 3 {
		name := fmt.Sprintf("pvc-chaos-%d", i)
		if err := raw.ResourceGroups.Spawn(ctx, "flotilla-chaos", lapi.ResourceGroupSpawn{ResourceDefinitionName: name, VolumeSizes: []int64{gib}}); err != nil {
			t.Fatal(err)
		}
		volumes = append(volumes, name)
	}
	t.Cleanup(func() { l.removeVolumes(ctx, volumes...) })
	invariant := func(step string) {
		t.Helper()
		counts := l.UpToDateDiskful()
		for _, v := range volumes {
			if counts[v] < 1 {
				t.Fatalf("after %s: %s has no UpToDate diskful replica: %+v", step, v, l.Replicas(v))
			}
		}
	}
	invariant("spawning")

	l.SetFaults(linstordouble.Faults{ErrorRate: 0.3, DropRate: 0.1, DelayRate: 0.2, MaxDelay: 3 * time.Second, HalfApplyRate: 0.5})
	t.Cleanup(func() { l.SetFaults(linstordouble.Faults{}) })
	changes := []func(*storagepolicyv1.StoragePolicy){
		func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 3 },
		func(p *storagepolicyv1.StoragePolicy) { p.Spec.TopologyKey = "" },
		func(p *storagepolicyv1.StoragePolicy) { p.Spec.AutoDiskful.AllowCleanup = false },
		func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 2 },
		func(p *storagepolicyv1.StoragePolicy) { p.Spec.AutoDiskful.AllowCleanup = true },
		func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 3 },
	}
	for i, change := range changes {
		patchSpec(t, "chaos", change)
		// A pod moves to a node without a replica; LINSTOR's periodic work runs as time passes.
		for j, v := range volumes {
			node := fmt.Sprintf("node-%d", (i+j)%3+1)
			_ = l.SetInUse(v, node, true)
			for _, other := range []string{"node-1", "node-2", "node-3"} {
				if other != node {
					_ = l.SetInUse(v, other, false)
				}
			}
		}
		for range 5 {
			l.Clock.Step(30 * time.Second)
			l.Step()
			invariant(fmt.Sprintf("change %d", i))
			time.Sleep(200 * time.Millisecond)
		}
	}

	l.SetFaults(linstordouble.Faults{})
	for range 4 { // synchronise and clean up what the last change started
		l.Clock.Step(time.Minute)
		l.Step()
		invariant("recovery")
	}
	condition(t, "chaos", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	eventually(t, 30*time.Second, "every volume with 3 UpToDate diskful replicas", func() (bool, error) {
		l.Step() // LINSTOR's periodic work goes on: new replicas synchronise
		counts := l.UpToDateDiskful()
		for _, v := range volumes {
			if counts[v] < 3 {
				return false, fmt.Errorf("%s: %+v", v, l.Replicas(v))
			}
		}
		return true, nil
	})
	g, _ := group(t, "flotilla-chaos")
	if g.Filter.PlaceCount != 3 || len(g.Filter.ReplicasOnDifferent) != 0 || g.Props["DrbdOptions/auto-diskful-allow-cleanup"] != "true" {
		t.Errorf("resource group after recovery: %+v", g)
	}
}

// removeVolumes deletes volumes of the double, as their claims' deletion would once no pod uses
// them.
func (l *testLINSTOR) removeVolumes(ctx context.Context, volumes ...string) {
	l.SetFaults(linstordouble.Faults{})
	for _, v := range volumes {
		for _, r := range l.Replicas(v) {
			_ = l.SetInUse(v, r.Node, false)
		}
		_ = raw.ResourceDefinitions.Delete(ctx, v)
	}
}

// A grown replica count reaches every volume even when LINSTOR's adjust stopped midway after the
// group itself was changed: the group then already says 3, and the volumes still have 1.
func TestHalfAppliedGrowConverges(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	p := &storagepolicyv1.StoragePolicy{ObjectMeta: metav1.ObjectMeta{Name: "half"}, Spec: storagepolicyv1.StoragePolicySpec{Replicas: 1, StoragePools: []string{"ssd"}}}
	create(t, p)
	condition(t, "half", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if err := raw.ResourceGroups.Spawn(ctx, "flotilla-half", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-half", VolumeSizes: []int64{gib}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.removeVolumes(ctx, "pvc-half") })
	l.SetFaults(linstordouble.Faults{HalfApplyRate: 1})
	t.Cleanup(func() { l.SetFaults(linstordouble.Faults{}) })
	patchSpec(t, "half", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 3 })
	eventually(t, 30*time.Second, "the group says 3 and the adjust began", func() (bool, error) {
		g, _ := group(t, "flotilla-half")
		return g.Filter.PlaceCount == 3 && len(l.Replicas("pvc-half")) >= 2, nil
	})
	l.SetFaults(linstordouble.Faults{})
	eventually(t, 30*time.Second, "the volume has 3 replicas", func() (bool, error) {
		return len(l.Replicas("pvc-half")) == 3, nil
	})
	condition(t, "half", fmeta.ReadyCondition, metav1.ConditionTrue, "")
}
