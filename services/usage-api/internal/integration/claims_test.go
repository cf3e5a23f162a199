package integration

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

// TestRealStateMetricsToReport follows the claims' data path for real: the real
// kube-state-metrics exports a bound claim, its volume and its labels, and, with the chart's
// custom resource state, the apps' HelmReleases; a real VictoriaMetrics scrapes them every
// second, and the report counts the volume's capacity under the claim's storage class and app,
// an app found in the HelmReleases' history once it is deleted (a HelmRelease outside the
// tenant's delivery namespace names nothing). A claim that is not bound counts nothing.
func TestRealStateMetricsToReport(t *testing.T) {
	if err := tree(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	port, telemetry := freePort(t), freePort(t)
	if err := env.StartProcess("kube-state-metrics", dir, nil,
		"--kubeconfig="+filepath.Join(dir, "kube-state-metrics.kubeconfig"),
		"--host=127.0.0.1", fmt.Sprintf("--port=%d", port), "--telemetry-host=127.0.0.1", fmt.Sprintf("--telemetry-port=%d", telemetry),
		"--resources=persistentvolumeclaims,persistentvolumes",
		"--custom-resource-state-config-file="+filepath.Join(repoRoot, "deploy/charts/usage-api/files/kube-state-metrics/apps.yaml"),
		"--metric-labels-allowlist=persistentvolumeclaims=[app.kubernetes.io/instance]"); err != nil {
		t.Fatal(err)
	}
	store := scrapingStore(t, dir, "kube-state-metrics", fmt.Sprintf("    static_configs: [{targets: [\"127.0.0.1:%d\"]}]\n", port))

	// No volume provisioner runs: the volume is made by hand and both are marked Bound, as the
	// persistent volume controller marks them.
	const class, capacityGiB = "usage-fast", 3.0
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "usage-pv-data"},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:       class,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "usage.test", VolumeHandle: "data"}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "tenant-acme", Name: "data"},
		},
	}
	claim := func(name, volume string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-acme", Labels: map[string]string{"app.kubernetes.io/instance": "postgres-orders"}},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(class),
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
				VolumeName:       volume,
			},
		}
	}
	data, pending := claim("data", pv.Name), claim("pending", "")
	release := func(namespace, kind string) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Name: "postgres-orders", Namespace: namespace,
				Labels: map[string]string{meta.LabelAppKind: kind, meta.LabelAppName: "orders"}},
			Spec: helmv2.HelmReleaseSpec{ReleaseName: "postgres-orders", TargetNamespace: "tenant-acme",
				Interval: metav1.Duration{Duration: time.Hour}, Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{
					Chart: "postgres", SourceRef: helmv2.CrossNamespaceObjectReference{Kind: "HelmRepository", Name: "catalog"}}}},
		}
	}
	app, spoofed := release(tenancyv1.DeliveryNamespace("tenant-acme"), "Postgres"), release("tenant-acme", "Spoofed")
	start := time.Now().Truncate(time.Second)
	for _, o := range []client.Object{pv, data, pending, app, spoofed} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.Delete(ctx, o) })
	}
	pv.Status.Phase = corev1.VolumeBound
	if err := kube.Status().Update(ctx, pv); err != nil {
		t.Fatal(err)
	}
	data.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: pv.Spec.Capacity, AccessModes: pv.Spec.AccessModes}
	if err := kube.Status().Update(ctx, data); err != nil {
		t.Fatal(err)
	}

	engine, err := usage.New(usage.Config{URL: store.URL, Resolution: time.Second, MaxGap: 10 * time.Second,
		SchedulerJob: "kube-scheduler", StateMetricsJob: "kube-state-metrics"})
	if err != nil {
		t.Fatal(err)
	}
	orders := usagev1.WorkloadReference{Kind: "Postgres", Name: "orders"}
	// No live apps: the report finds the app in the history of its HelmRelease.
	scope := usage.Scope{Tenants: []usage.Tenant{{Name: "acme", Namespace: "tenant-acme", Delivery: app.Namespace}}}
	var report usagev1.Report
	var reportErr error
	// Two minutes: alone it takes seconds, but CI runs it beside other control planes on 2 cores.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		end := time.Now().Truncate(time.Second)
		report, reportErr = engine.Report(ctx, scope, usage.Period{Start: start, End: end, Step: end.Sub(start)})
		if reportErr != nil || len(report.Total.PersistentStorageGiBHours) == 0 || len(report.Consumers) == 0 || report.Consumers[0].Workload != orders {
			return false, nil
		}
		v, _ := strconv.ParseFloat(report.Total.PersistentStorageGiBHours[0].GiBHours, 64)
		return v*3600 >= 5*capacityGiB, nil // five samples at least
	}); err != nil {
		t.Fatalf("no report of the claim's capacity under its app: %v (last report %+v, error %v)\n%s", err, report, reportErr, scrapeState(store, dir, "kube-state-metrics"))
	}
	// The app is deleted: its usage stays its own.
	if err := kube.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few scrapes without it
	end := time.Now().Truncate(time.Second)
	if report, err = engine.Report(ctx, scope, usage.Period{Start: start, End: end, Step: end.Sub(start)}); err != nil {
		t.Fatal(err)
	}
	if len(report.Consumers) != 1 || report.Consumers[0].Workload != orders {
		t.Fatalf("consumers %+v: want only %v", report.Consumers, orders)
	}
	storage := report.Consumers[0].Consumptions.PersistentStorageGiBHours
	if len(storage) != 1 || storage[0].StorageClassName != class {
		t.Fatalf("persistent storage %+v: want one entry of class %s", storage, class)
	}
	// Every sample counts one second of the volume's capacity: a whole number of seconds.
	v, err := strconv.ParseFloat(storage[0].GiBHours, 64)
	if err != nil {
		t.Fatal(err)
	}
	if seconds := v * 3600 / capacityGiB; math.Abs(seconds-math.Round(seconds)) > 1e-6 {
		t.Errorf("%v GiB-hours: not whole seconds of %v GiB", v, capacityGiB)
	}
}
