package integration_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/controller/policy"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

func replicated(name string) *storagepolicyv1.StoragePolicy {
	return &storagepolicyv1.StoragePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagepolicyv1.StoragePolicySpec{
			Replicas: 2, StoragePools: []string{"ssd"}, TopologyKey: "topology.kubernetes.io/zone",
			AutoDiskful: &storagepolicyv1.AutoDiskful{Enabled: true, After: &metav1.Duration{Duration: 10 * time.Minute}, AllowCleanup: true},
		},
	}
}

func create(t *testing.T, p *storagepolicyv1.StoragePolicy) {
	t.Helper()
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), p)
		eventually(t, 30*time.Second, "policy "+p.Name+" gone", func() (bool, error) {
			err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), &storagepolicyv1.StoragePolicy{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
}

// condition waits until the policy's condition has status (and, if given, reason), and returns
// the policy.
func condition(t *testing.T, name, cond string, status metav1.ConditionStatus, reason string) *storagepolicyv1.StoragePolicy {
	t.Helper()
	p := &storagepolicyv1.StoragePolicy{}
	eventually(t, 30*time.Second, name+" "+cond+"="+string(status)+" "+reason, func() (bool, error) {
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, p); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, cond)
		return c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == p.Generation, nil
	})
	return p
}

func group(t *testing.T, name string) (linstor.ResourceGroup, bool) {
	t.Helper()
	groups, err := lc.ResourceGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g, ok := groups[name]
	return g, ok
}

// A replicated and a local policy become a LINSTOR resource group and a StorageClass each, and
// report the capacity of their qualifying pools.
func TestPolicyBecomesResourceGroupAndStorageClass(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	create(t, replicated("ha"))
	local := &storagepolicyv1.StoragePolicy{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: storagepolicyv1.StoragePolicySpec{
		Replicas: 1, StoragePools: []string{"ssd"}, NodeSelector: map[string]string{"disk": "ssd"}, Filesystem: "xfs"}}
	create(t, local)
	ha := condition(t, "ha", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	condition(t, "local", fmeta.ReadyCondition, metav1.ConditionTrue, "")

	g, ok := group(t, "flotilla-ha")
	if !ok {
		t.Fatal("no resource group flotilla-ha")
	}
	if g.Filter.PlaceCount != 2 || !slices.Equal(g.Filter.StoragePoolList, []string{"ssd"}) ||
		!slices.Equal(g.Filter.ReplicasOnDifferent, []string{"Aux/topology.kubernetes.io/zone"}) {
		t.Errorf("select filter of flotilla-ha: %+v", g.Filter)
	}
	if g.Props[storage.PropAutoDiskful] != "10" || g.Props[storage.PropAutoDiskfulAllowCleanup] != "true" || g.Props[storage.PropPolicy] != "ha" {
		t.Errorf("props of flotilla-ha: %v", g.Props)
	}
	if g, _ := group(t, "flotilla-local"); !slices.Equal(g.Filter.ReplicasOnSame, []string{"Aux/disk=ssd"}) || g.Props[storage.PropFileSystem] != "xfs" {
		t.Errorf("flotilla-local: %+v", g)
	}

	sc := &storagev1.StorageClass{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "ha"}, sc); err != nil {
		t.Fatal(err)
	}
	if sc.Provisioner != "linstor.csi.linbit.com" || sc.Parameters["linstor.csi.linbit.com/resourceGroup"] != "flotilla-ha" ||
		*sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || !*sc.AllowVolumeExpansion {
		t.Errorf("StorageClass ha: %+v", sc)
	}

	if len(ha.Status.Pools) != 3 || ha.Status.Pools[0].Topology != "a" || ha.Status.Pools[0].Total.Cmp(resource.MustParse("100Gi")) != 0 {
		t.Errorf("pools in status: %+v", ha.Status.Pools)
	}
	if ha.Status.LargestVolume == nil || ha.Status.LargestVolume.Cmp(resource.MustParse("100Gi")) != 0 {
		t.Errorf("largest volume: %v", ha.Status.LargestVolume)
	}
	if ha.Status.ObservedGeneration != ha.Generation || ha.Status.ResourceGroup != "flotilla-ha" || ha.Status.StorageClassName != "ha" {
		t.Errorf("status: %+v", ha.Status)
	}
}

// Capacity LINSTOR reports later reaches the status within a poll; a poll that finds nothing new
// writes nothing, and a converged policy causes no LINSTOR write and no API write.
func TestCapacityFollowsLinstorAndSteadyStateIsQuiet(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	create(t, replicated("cap"))
	condition(t, "cap", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if err := l.SetFree("node-2", "ssd", 40*gib); err != nil {
		t.Fatal(err)
	}
	// Zones a and c still have 100Gi each: two replicas of 100Gi still fit.
	p := &storagepolicyv1.StoragePolicy{}
	eventually(t, 10*time.Second, "node-2's free space in status", func() (bool, error) {
		if err := k8s.Get(ctx, types.NamespacedName{Name: "cap"}, p); err != nil {
			return false, err
		}
		return len(p.Status.Pools) == 3 && p.Status.Pools[1].Free.Cmp(resource.MustParse("40Gi")) == 0, nil
	})
	if p.Status.LargestVolume.Cmp(resource.MustParse("100Gi")) != 0 {
		t.Errorf("largest volume %v, want 100Gi", p.Status.LargestVolume)
	}
	_ = l.SetFree("node-1", "ssd", 30*gib)
	eventually(t, 10*time.Second, "largest volume bounded by zone b", func() (bool, error) {
		err := k8s.Get(ctx, types.NamespacedName{Name: "cap"}, p)
		return err == nil && p.Status.LargestVolume.Cmp(resource.MustParse("40Gi")) == 0, err
	})

	rv, writes := p.ResourceVersion, l.Writes()
	time.Sleep(2 * time.Second) // ten polls of the view
	if err := k8s.Get(ctx, types.NamespacedName{Name: "cap"}, p); err != nil {
		t.Fatal(err)
	}
	if p.ResourceVersion != rv {
		t.Errorf("the converged policy was written (resourceVersion %s → %s)", rv, p.ResourceVersion)
	}
	if w := l.Writes(); w != writes {
		t.Errorf("%d LINSTOR writes for a converged policy", w-writes)
	}
}

// Changing a policy converges its resource group (a grown replica count reaches existing volumes;
// a removed topology key is cleared) without touching the StorageClass; a StorageClass parameter
// change makes the class anew while no volume uses it, and is refused, naming the field, once
// one does.
func TestPolicyChangeConverges(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	p := replicated("grow")
	create(t, p)
	condition(t, "grow", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if err := raw.ResourceGroups.Spawn(ctx, "flotilla-grow", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-grow", VolumeSizes: []int64{gib}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.ResourceDefinitions.Delete(ctx, "pvc-grow") })
	sc := &storagev1.StorageClass{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "grow"}, sc); err != nil {
		t.Fatal(err)
	}
	scUID := sc.UID

	patchSpec(t, "grow", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 3; p.Spec.TopologyKey = "" })
	condition(t, "grow", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	g, _ := group(t, "flotilla-grow")
	if g.Filter.PlaceCount != 3 || len(g.Filter.ReplicasOnDifferent) != 0 {
		t.Errorf("resource group after the change: %+v", g.Filter)
	}
	if n := len(l.Replicas("pvc-grow")); n != 3 {
		t.Errorf("the existing volume has %d replicas, want 3", n)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "grow"}, sc); err != nil || sc.UID != scUID {
		t.Errorf("the StorageClass was replaced for a change it does not carry (%v)", err)
	}

	patchSpec(t, "grow", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Filesystem = "xfs" })
	eventually(t, 30*time.Second, "StorageClass made anew with xfs", func() (bool, error) {
		err := k8s.Get(ctx, types.NamespacedName{Name: "grow"}, sc)
		return err == nil && sc.Parameters["csi.storage.k8s.io/fstype"] == "xfs", client.IgnoreNotFound(err)
	})
	condition(t, "grow", fmeta.ReadyCondition, metav1.ConditionTrue, "")

	if err := createPV(t, csiVolume("pvc-grow", "grow", "1Gi")); err != nil {
		t.Fatal(err)
	}
	patchSpec(t, "grow", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Filesystem = "ext4" })
	stalled := condition(t, "grow", fmeta.StalledCondition, metav1.ConditionTrue, storagepolicyv1.StorageClassImmutableReason)
	msg := meta.FindStatusCondition(stalled.Status.Conditions, fmeta.StalledCondition).Message
	if !strings.Contains(msg, "spec.filesystem") || !strings.Contains(msg, "PersistentVolume pvc-grow") {
		t.Errorf("stalled message does not name the field and the volume: %q", msg)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "grow"}, sc); err != nil || sc.Parameters["csi.storage.k8s.io/fstype"] != "xfs" {
		t.Errorf("the StorageClass a volume uses changed (%v): %v", err, sc.Parameters)
	}
}

func patchSpec(t *testing.T, name string, change func(*storagepolicyv1.StoragePolicy)) {
	t.Helper()
	ctx := context.Background()
	p := &storagepolicyv1.StoragePolicy{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	before := p.DeepCopy()
	change(p)
	if err := k8s.Patch(ctx, p, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// With LINSTOR unreachable (its port refusing connections) or failing (answering 500s), the policy
// says which and nothing is deleted; once LINSTOR answers again the policy is Ready without anything
// having been recreated.
func TestLinstorDown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reachable metav1.ConditionStatus
		down      func(t *testing.T, l *testLINSTOR) (up func())
	}{
		{"refusing", metav1.ConditionFalse, func(t *testing.T, _ *testLINSTOR) func() { return linstorOutage(t) }},
		{"failing", metav1.ConditionTrue, func(t *testing.T, l *testLINSTOR) func() {
			l.SetFaults(linstordouble.Faults{ErrorRate: 1})
			return func() { l.SetFaults(linstordouble.Faults{}) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := ownLINSTOR(t)
			name := "down-" + tc.name
			create(t, replicated(name))
			condition(t, name, fmeta.ReadyCondition, metav1.ConditionTrue, "")
			up := sync.OnceFunc(tc.down(t, l))
			t.Cleanup(up)
			patchSpec(t, name, func(p *storagepolicyv1.StoragePolicy) { p.Spec.Replicas = 3 })
			p := condition(t, name, fmeta.ReadyCondition, metav1.ConditionFalse, "")
			if c := meta.FindStatusCondition(p.Status.Conditions, storagepolicyv1.LinstorReachableCondition); c == nil || c.Status != tc.reachable {
				t.Errorf("%s condition: %+v", storagepolicyv1.LinstorReachableCondition, p.Status.Conditions)
			}
			if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &storagev1.StorageClass{}); err != nil {
				t.Errorf("StorageClass while LINSTOR is down: %v", err)
			}
			up()
			if _, ok := group(t, "flotilla-"+name); !ok {
				t.Error("the resource group was deleted while LINSTOR was down")
			}
			condition(t, name, fmeta.ReadyCondition, metav1.ConditionTrue, "")
			if g, _ := group(t, "flotilla-"+name); g.Filter.PlaceCount != 3 {
				t.Errorf("place count after recovery: %d", g.Filter.PlaceCount)
			}
		})
	}
}

// A StorageClass or resource group of the policy's name that Flotilla did not create is never
// touched; the policy is Stalled and says why.
func TestForeignObjectsAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	foreign := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Provisioner: "example.com/other", Parameters: map[string]string{"x": "y"}}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, foreign) })
	create(t, replicated("foreign"))
	condition(t, "foreign", fmeta.StalledCondition, metav1.ConditionTrue, storagepolicyv1.StorageClassConflictReason)
	sc := &storagev1.StorageClass{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "foreign"}, sc); err != nil || sc.Provisioner != "example.com/other" || len(sc.Labels) != 0 {
		t.Errorf("the foreign StorageClass was touched: %+v (%v)", sc, err)
	}

	if err := lc.CreateResourceGroup(ctx, storage.ResourceGroup{Name: "flotilla-theirs", Props: map[string]string{"Aux/owner": "ops"}, Filter: storage.Filter{PlaceCount: 1}}); err != nil {
		t.Fatal(err)
	}
	create(t, replicated("theirs"))
	condition(t, "theirs", fmeta.StalledCondition, metav1.ConditionTrue, storagepolicyv1.ResourceGroupConflictReason)
	if g, _ := group(t, "flotilla-theirs"); g.Filter.PlaceCount != 1 || g.Props[storage.PropPolicy] != "" {
		t.Errorf("the foreign resource group was touched: %+v", g)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "theirs"}, &storagev1.StorageClass{}); !apierrors.IsNotFound(err) {
		t.Errorf("a StorageClass was made for a resource group Flotilla does not own (%v)", err)
	}
}

// Deleting a policy removes its StorageClass at once and its resource group once no volume is
// in it; volumes are never deleted on its behalf, and what holds the policy is named.
func TestDeletionWaitsForVolumes(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	p := replicated("gone")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	condition(t, "gone", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if err := raw.ResourceGroups.Spawn(ctx, "flotilla-gone", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-gone", VolumeSizes: []int64{gib}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "StorageClass deleted", func() (bool, error) {
		err := k8s.Get(ctx, types.NamespacedName{Name: "gone"}, &storagev1.StorageClass{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	held := condition(t, "gone", fmeta.ReadyCondition, metav1.ConditionFalse, fmeta.DeletingReason)
	if msg := meta.FindStatusCondition(held.Status.Conditions, fmeta.ReadyCondition).Message; !strings.Contains(msg, "pvc-gone") {
		t.Errorf("the held policy does not name the volume: %q", msg)
	}
	if n := l.UpToDateDiskful()["pvc-gone"]; n != 2 {
		t.Errorf("the volume has %d UpToDate replicas, want 2", n)
	}
	if err := raw.ResourceDefinitions.Delete(ctx, "pvc-gone"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "policy gone", func() (bool, error) {
		err := k8s.Get(ctx, types.NamespacedName{Name: "gone"}, &storagepolicyv1.StoragePolicy{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if _, ok := group(t, "flotilla-gone"); ok {
		t.Error("the resource group outlived its policy")
	}
}

// A policy no set of nodes can serve is not Ready, and says why with the numbers; it is not
// Stalled: nodes with the label may come.
func TestPolicyWithoutQualifyingNodes(t *testing.T) {
	ownLINSTOR(t)
	p := replicated("nowhere")
	p.Spec.NodeSelector = map[string]string{"disk": "nvme"}
	create(t, p)
	got := condition(t, "nowhere", storagepolicyv1.PlaceableCondition, metav1.ConditionFalse, storagepolicyv1.NoCapacityReason)
	if msg := meta.FindStatusCondition(got.Status.Conditions, storagepolicyv1.PlaceableCondition).Message; !strings.Contains(msg, "only 0 distinct qualifying zones") {
		t.Errorf("Placeable message: %q", msg)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, fmeta.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || meta.FindStatusCondition(got.Status.Conditions, fmeta.StalledCondition) != nil {
		t.Errorf("conditions: %+v", got.Status.Conditions)
	}
}

// A reconcile working from a copy older than the policy's last status write (the cache had not
// caught up) writes nothing, so it neither restamps the conditions nor announces Ready twice, and
// looks again.
func TestAReconcileFromAStaleCopyWritesNothing(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	create(t, replicated("stale"))
	ready := condition(t, "stale", fmeta.ReadyCondition, metav1.ConditionTrue, "")

	// What the cache held before the status write: no conditions.
	stale := ready.DeepCopy()
	stale.Status.Conditions = nil
	lagging, err := testenv.Lagging(env.Config, k8s.Scheme(), stale)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a condition written again would carry another transition time (seconds)
	r := &policy.Reconciler{Client: lagging, APIReader: lagging, LINSTOR: lc, View: view, Retry: time.Second, WebhookConfiguration: webhookConfig}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "stale"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Error("a stale copy is not looked at again")
	}
	after := &storagepolicyv1.StoragePolicy{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "stale"}, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != ready.ResourceVersion {
		t.Errorf("the status was written again from a stale copy (resourceVersion %s → %s)", ready.ResourceVersion, after.ResourceVersion)
	}
}
