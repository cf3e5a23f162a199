package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
)

// node makes a schedulable Node (no kubelet runs here) in zone.
func node(t *testing.T, name, zone string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}}}
	if err := k8s.Create(ctx, n); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
		t.Fatal(err)
	}
	// kube-apiserver taints a new Node not-ready until a kubelet says otherwise; none runs here.
	n.Spec.Taints = nil
	if err := k8s.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("500")}
	n.Status.Capacity, n.Status.Allocatable = capacity, capacity
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if err := k8s.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// boundClaim makes a PersistentVolume of the LINSTOR CSI driver for LINSTOR volume rd, as the
// driver's provisioner would, and a claim bound to it, as the PV controller would bind them.
func boundClaim(t *testing.T, ns, rd, class string) string {
	t.Helper()
	ctx := context.Background()
	pvc := claim(ns, rd, class, "1Gi")
	pvc.Spec.VolumeName = rd
	pvc.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
	if err := createClaim(t, pvc); err != nil {
		t.Fatal(err)
	}
	pv := csiVolume(rd, class, "1Gi")
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: rd, UID: pvc.UID, APIVersion: "v1"}
	if err := createPV(t, pv); err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = corev1.VolumeBound
	if err := k8s.Status().Update(ctx, pv); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.AccessModes = pvc.Spec.AccessModes
	pvc.Status.Capacity = pv.Spec.Capacity
	if err := k8s.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	return rd
}

// createPV creates pv, and deletes it for good when the test ends (deletePV).
func createPV(t *testing.T, pv *corev1.PersistentVolume) error {
	t.Helper()
	if err := k8s.Create(context.Background(), pv); err != nil {
		return err
	}
	t.Cleanup(func() { deletePV(t, pv.Name) })
	return nil
}

// deletePV deletes PersistentVolume name and waits until it is gone. kube-apiserver puts the
// kubernetes.io/pv-protection finalizer on every volume, and the controller that takes it off
// does not run here (testenv runs kube-controller-manager's claim protection only): it is taken
// off here, as that controller would once the test's claim and pod are gone. A volume left
// terminating would still be a volume of its StorageClass for later tests, and in the way of the
// same test run again (-count).
func deletePV(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_ = k8s.Delete(ctx, pv)
	eventually(t, 30*time.Second, "PersistentVolume "+name+" gone", func() (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pv), pv); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		if controllerutil.RemoveFinalizer(pv, "kubernetes.io/pv-protection") {
			return false, k8s.Update(ctx, pv)
		}
		return false, nil
	})
}

// csiVolume is the PersistentVolume the LINSTOR CSI driver makes for LINSTOR volume rd.
func csiVolume(rd, class, size string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: rd}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: class, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "linstor.csi.linbit.com", VolumeHandle: rd}},
	}}
}

func podWithClaim(ns, name, claimName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "db", Image: "postgres",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
		},
	}
}

// The real kube-scheduler, with the extender, binds each pod to a node holding an UpToDate replica
// of its volume: among four nodes, of which two hold each volume and one has no LINSTOR satellite.
func TestPodsLandNextToTheirData(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	ns := namespace(t, "near")
	for i, zone := range []string{"a", "b", "c"} {
		node(t, fmt.Sprintf("node-%d", i+1), zone)
	}
	node(t, "node-4", "a") // no LINSTOR satellite: it cannot attach a LINSTOR volume
	create(t, replicated("near"))
	condition(t, "near", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	var pods []*corev1.Pod
	var volumes []string
	t.Cleanup(func() { l.removeVolumes(ctx, volumes...) })
	for i := range 8 {
		rd := fmt.Sprintf("pvc-near-%d", i)
		if err := raw.ResourceGroups.Spawn(ctx, "flotilla-near", lapi.ResourceGroupSpawn{ResourceDefinitionName: rd, VolumeSizes: []int64{gib}}); err != nil {
			t.Fatal(err)
		}
		volumes = append(volumes, rd)
		boundClaim(t, ns, rd, "near")
	}
	eventually(t, 10*time.Second, "the view knows the volumes", func() (bool, error) {
		for _, rd := range volumes {
			if _, ok := view.Volume(rd); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	for i, rd := range volumes {
		p := podWithClaim(ns, fmt.Sprintf("db-%d", i), rd)
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
		t.Cleanup(func() { _ = k8s.Delete(ctx, p, client.GracePeriodSeconds(0)) })
	}
	// Asked directly, as kube-scheduler asks: the node without a satellite is filtered out, and
	// the nodes holding the volume score highest.
	names := []string{"node-1", "node-2", "node-3", "node-4"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pods[0], NodeNames: &names})
	var filtered extenderv1.ExtenderFilterResult
	post(t, extenderURL+"/filter", body, &filtered)
	if _, failed := filtered.FailedNodes["node-4"]; !failed || slices.Contains(*filtered.NodeNames, "node-4") {
		t.Errorf("node-4 (no LINSTOR satellite) passed the filter: %+v", filtered)
	}
	var scores extenderv1.HostPriorityList
	post(t, extenderURL+"/prioritize", body, &scores)
	scored := map[string]int64{} // a node left out of the list scores 0
	for _, hp := range scores {
		scored[hp.Host] = hp.Score
	}
	for _, n := range names {
		local := slices.ContainsFunc(l.Replicas(volumes[0]), func(r linstordouble.Replica) bool { return r.Node == n && r.Pool != "" })
		if local != (scored[n] == extenderv1.MaxExtenderPriority) {
			t.Errorf("score of %s: %d (holds a replica: %v)", n, scored[n], local)
		}
	}

	for i, p := range pods {
		eventually(t, 60*time.Second, p.Name+" scheduled", func() (bool, error) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err
			}
			return p.Spec.NodeName != "", fmt.Errorf("not scheduled: %+v", p.Status.Conditions)
		})
		var holders []string
		for _, r := range l.Replicas(volumes[i]) {
			if r.Pool != "" {
				holders = append(holders, r.Node)
			}
		}
		if !slices.Contains(holders, p.Spec.NodeName) {
			t.Errorf("%s was bound to %s; its volume's replicas are on %v", p.Name, p.Spec.NodeName, holders)
		}
	}
}

func post(t *testing.T, url string, body []byte, into any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

// A claim waiting for its first consumer is provisioned where kube-scheduler puts its pod: the
// volume gets a replica on that node (and another in another zone), and the pod is bound there.
// A claim not yet provisioned (WaitForFirstConsumer) of a Flotilla class will be a LINSTOR
// volume wherever the pod lands: a node without a LINSTOR satellite can never hold or attach it,
// and is filtered out before the scheduler picks it and provisioning fails there.
func TestPendingClaimFiltersNodesWithoutSatellite(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	ns := namespace(t, "pending")
	node(t, "node-4", "a") // no LINSTOR satellite
	create(t, replicated("pending"))
	condition(t, "pending", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	pvc := claim(ns, "data", "pending", "1Gi")
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, pvc) })
	p := podWithClaim(ns, "db", "data") // not created: asked about as kube-scheduler asks
	names := []string{"node-1", "node-2", "node-3", "node-4"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &names})
	var filtered extenderv1.ExtenderFilterResult
	// (the extender reads claims from the manager's cache, which sees the new claim shortly)
	eventually(t, 10*time.Second, "node-4 (no LINSTOR satellite) filtered out for a pending claim", func() (bool, error) {
		post(t, extenderURL+"/filter", body, &filtered)
		_, failed := filtered.FailedNodes["node-4"]
		return failed && !slices.Contains(*filtered.NodeNames, "node-4"), fmt.Errorf("filter result %+v", filtered)
	})
	if len(*filtered.NodeNames) != 3 {
		t.Errorf("the satellites were not all kept: %v", *filtered.NodeNames)
	}
	// A claim of another class is not the extender's business: every node passes.
	other := claim(ns, "other", "standard", "1Gi")
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, other) })
	body, _ = json.Marshal(extenderv1.ExtenderArgs{Pod: podWithClaim(ns, "web", "other"), NodeNames: &names})
	post(t, extenderURL+"/filter", body, &filtered)
	if len(*filtered.NodeNames) != 4 {
		t.Errorf("a pod without LINSTOR claims was filtered: %+v", filtered)
	}
}

func TestClaimIsProvisionedWhereItsPodIsScheduled(t *testing.T) {
	ctx := context.Background()
	l := ownLINSTOR(t)
	ns := namespace(t, "wffc")
	zones := zonedNodes(t)
	create(t, replicated("wffc"))
	condition(t, "wffc", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	pvc := claim(ns, "data", "wffc", "1Gi")
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, pvc) })
	p := podWithClaim(ns, "db", "data")
	got := scheduledZones(t, zones, p)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deletePV(t, pvc.Spec.VolumeName)
		l.removeVolumes(ctx, pvc.Spec.VolumeName)
	})
	var diskful []string
	for _, r := range l.Replicas(pvc.Spec.VolumeName) {
		if r.Pool != "" {
			diskful = append(diskful, r.Node)
		}
	}
	if len(diskful) != 2 || !slices.Contains(diskful, p.Spec.NodeName) || zones[diskful[0]] == zones[diskful[1]] {
		t.Errorf("pod on %s (zone %s); volume %s's replicas on %v", p.Spec.NodeName, got[0], pvc.Spec.VolumeName, diskful)
	}
}
