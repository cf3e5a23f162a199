package extender_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/extender"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
)

// kube-scheduler asks about a pod as soon as its own informer has the pod, and the manager's
// cache may learn of the pod's claim moments later. A claim of a LINSTOR class that the cache has
// not seen yet still keeps the pod off a node without a LINSTOR satellite (in CI the pod landed
// on such a node, and provisioning its volume there failed for ever).
func TestFilterReadsAClaimTheCacheHasNotSeenYet(t *testing.T) {
	ctx := context.Background()
	d := linstordouble.New(linstordouble.Options{})
	for _, n := range []string{"node-1", "node-2"} {
		d.AddNode(n, nil, linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 1 << 20, FreeKiB: 1 << 20})
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	view := viewOf(ctx, t, srv.URL)

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "replicated"}, Provisioner: storagepolicyv1.CSIDriver}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("replicated")}}
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(class).Build() // not the claim yet
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(class, pvc).Build()
	x := &extender.Extender{Reader: cache, APIReader: api, View: view, ZoneKey: "topology.kubernetes.io/zone"}

	names := []string{"node-1", "node-2", "node-3"}
	res, err := x.Filter(ctx, &extenderv1.ExtenderArgs{Pod: podWithClaim("data"), NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	if _, failed := res.FailedNodes["node-3"]; !failed || len(*res.NodeNames) != 2 {
		t.Errorf("node-3 has no LINSTOR satellite and passed the filter: %+v %v", res.FailedNodes, *res.NodeNames)
	}
}

// A node holding an UpToDate diskful replica of the pod's volume scores highest and, while it is a
// candidate, alone. Without it among the candidates, the nodes in its zone score half, and every
// other node is left out of the answer (kube-scheduler counts it 0).
func TestPrioritizeScoresReplicasThenTheirZone(t *testing.T) {
	ctx := context.Background()
	x, holder, zone := oneReplica(ctx, t)
	for _, tc := range []struct {
		what       string
		candidates func(n string) bool
		want       func(n string) int64
	}{
		{"the replica's node is a candidate", func(string) bool { return true }, func(n string) int64 {
			if n == holder {
				return extenderv1.MaxExtenderPriority
			}
			return 0
		}},
		{"the replica's node is not a candidate", func(n string) bool { return n != holder }, func(n string) int64 {
			if zone[n] == zone[holder] {
				return extenderv1.MaxExtenderPriority / 2
			}
			return 0
		}},
	} {
		var names []string
		want := map[string]int64{}
		for _, n := range slices.Sorted(maps.Keys(zone)) {
			if !tc.candidates(n) {
				continue
			}
			names = append(names, n)
			if s := tc.want(n); s > 0 {
				want[n] = s
			}
		}
		list, err := x.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: podWithClaim("data"), NodeNames: &names})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, hp := range *list {
			got[hp.Host] = hp.Score
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: scores %v, want %v (the replica is on %s)", tc.what, got, want, holder)
		}
	}
}

// Over HTTP the extender reads what kube-scheduler sends: the whole pod, whose fields it does not
// need (status, managed fields, volumes of other kinds) it skips, and answers as it does to the
// same pod called directly. Whole nodes instead of names (nodeCacheCapable: false) are refused
// with the setting to change.
func TestHandlerReadsWhatKubeSchedulerSends(t *testing.T) {
	ctx := context.Background()
	x, holder, zone := oneReplica(ctx, t)
	srv := httptest.NewServer(x.Handler())
	t.Cleanup(srv.Close)

	pod := podWithClaim("data")
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	pod.Spec.Volumes = append([]corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}, pod.Spec.Volumes...)
	pod.Spec.Containers = []corev1.Container{{Name: "db", Image: "postgres"}}
	pod.Status.Phase = corev1.PodPending
	names := slices.Sorted(maps.Keys(zone))
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+"/prioritize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got extenderv1.HostPriorityList
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	want, err := x.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: podWithClaim("data"), NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, *want) || len(got) != 1 || got[0].Host != holder {
		t.Errorf("over HTTP %v, called directly %v (the replica is on %s)", got, *want, holder)
	}

	body, err = json.Marshal(extenderv1.ExtenderArgs{Pod: pod, Nodes: &corev1.NodeList{Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: holder}}}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post(srv.URL+"/filter", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "nodeCacheCapable: true") {
		t.Errorf("whole nodes: %s %s, want 400 naming nodeCacheCapable", resp.Status, msg)
	}
}

// oneReplica is an extender over a LINSTOR of four nodes in zones a and b holding volume vol-1 in
// one replica, bound to claim db/data; it returns the replica's node and each node's zone.
func oneReplica(ctx context.Context, t *testing.T) (x *extender.Extender, holder string, zone map[string]string) {
	t.Helper()
	d := linstordouble.New(linstordouble.Options{})
	zone = map[string]string{"node-1": "a", "node-2": "a", "node-3": "b", "node-4": "b"}
	for n, z := range zone {
		d.AddNode(n, map[string]string{"Aux/topology.kubernetes.io/zone": z}, linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 1 << 20, FreeKiB: 1 << 20})
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	for _, req := range [][2]string{
		{"/v1/resource-groups", `{"name":"rg","select_filter":{"place_count":1,"storage_pool_list":["ssd"]}}`},
		{"/v1/resource-groups/rg/spawn", `{"resource_definition_name":"vol-1","volume_sizes":[1024]}`},
	} {
		path, body := req[0], req[1]
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
	}
	replicas := d.Replicas("vol-1")
	if len(replicas) != 1 {
		t.Fatalf("want one replica, LINSTOR placed %v", replicas)
	}

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "vol-1"}}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "vol-1"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		CSI: &corev1.CSIPersistentVolumeSource{Driver: storagepolicyv1.CSIDriver, VolumeHandle: "vol-1"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pvc, pv).Build()
	x = &extender.Extender{Reader: c, APIReader: c, View: viewOf(ctx, t, srv.URL), ZoneKey: "topology.kubernetes.io/zone"}
	return x, replicas[0].Node, zone
}

// podWithClaim is pod db/db with one volume, claim.
func podWithClaim(claim string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
		Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
}

// viewOf is a polled view of the LINSTOR at u.
func viewOf(ctx context.Context, t *testing.T, u string) *linstor.View {
	t.Helper()
	base, _ := url.Parse(u)
	lc, err := linstor.NewWithHTTPClient(base, http.DefaultClient, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	view := linstor.NewView(lc, 0, logr.Discard())
	view.Refresh(ctx)
	return view
}
