package extender_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	base, _ := url.Parse(srv.URL)
	lc, err := linstor.NewWithHTTPClient(base, http.DefaultClient, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	view := linstor.NewView(lc, 0, logr.Discard())
	view.Refresh(ctx)

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
