package extender_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
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

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
		Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	names := []string{"node-1", "node-2", "node-3"}
	res, err := x.Filter(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	if _, failed := res.FailedNodes["node-3"]; !failed || len(*res.NodeNames) != 2 {
		t.Errorf("node-3 has no LINSTOR satellite and passed the filter: %+v %v", res.FailedNodes, *res.NodeNames)
	}
}

// A node holding an UpToDate diskful replica of the pod's volume scores highest, a node in the
// zone of one half of that, and every other node is left out of the answer (kube-scheduler counts
// it 0).
func TestPrioritizeScoresReplicasThenTheirZone(t *testing.T) {
	ctx := context.Background()
	d := linstordouble.New(linstordouble.Options{})
	zone := map[string]string{"node-1": "a", "node-2": "a", "node-3": "b", "node-4": "b"}
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
	view := viewOf(ctx, t, srv.URL)

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "vol-1"}}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "vol-1"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		CSI: &corev1.CSIPersistentVolumeSource{Driver: storagepolicyv1.CSIDriver, VolumeHandle: "vol-1"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pvc, pv).Build()
	x := &extender.Extender{Reader: c, APIReader: c, View: view, ZoneKey: "topology.kubernetes.io/zone"}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
		Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	names := []string{"node-1", "node-2", "node-3", "node-4"}
	list, err := x.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, hp := range *list {
		got[hp.Host] = hp.Score
	}
	replicas := d.Replicas("vol-1")
	if len(replicas) != 1 {
		t.Fatalf("want one replica, LINSTOR placed %v", replicas)
	}
	holder := replicas[0].Node
	want := map[string]int64{}
	for n, z := range zone {
		switch {
		case n == holder:
			want[n] = extenderv1.MaxExtenderPriority
		case z == zone[holder]:
			want[n] = extenderv1.MaxExtenderPriority / 2
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("scores %v, want %v (the replica is on %s)", got, want, holder)
	}
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
