package integration

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

// TestRealSchedulerToReport follows the data path for real: the real kube-scheduler binds a pod
// and exports its effective requests, a real VictoriaMetrics scrapes them every second, and the
// report counts them: the init container's request where it is the larger, plus the pod overhead
// of its RuntimeClass.
func TestRealSchedulerToReport(t *testing.T) {
	if err := tree(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	port := freePort(t)
	sched, err := env.StartScheduler(dir, testenv.SchedulerOptions{MetricsPort: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sched.Stop)
	store := scrapingStore(t, dir, "kube-scheduler", fmt.Sprintf(`    scheme: https
    tls_config: {insecure_skip_verify: true}
    metrics_path: /metrics/resources
    static_configs: [{targets: ["127.0.0.1:%d"]}]
`, port))

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "usage-node"}}
	if err := kube.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, node) })
	node.Spec.Taints = nil
	if err := kube.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("10")}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := kube.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "usage-vm"}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}
	if err := kube.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, rc) })
	req := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "measured", Namespace: "tenant-acme"},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc.Name,
			InitContainers:   []corev1.Container{{Name: "init", Image: "x", Resources: req("500m", "256Mi")}},
			Containers: []corev1.Container{
				{Name: "a", Image: "x", Resources: req("100m", "512Mi")},
				{Name: "b", Image: "x", Resources: req("200m", "512Mi")},
			},
		},
	}
	// Effective: max(500m, 100m+200m) + 50m cores; max(256Mi, 1Gi) + 64Mi of memory.
	const cpu, memGiB = 0.55, 1.0625
	start := time.Now().Truncate(time.Second)
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, pod) })
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return err == nil && pod.Spec.NodeName != "", nil
	}); err != nil {
		t.Fatalf("kube-scheduler did not bind the pod: %v", err)
	}

	engine, err := usage.New(usage.Config{URL: store.URL, Resolution: time.Second, MaxGap: 10 * time.Second, SchedulerJob: "kube-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	scope := usage.Scope{Tenants: []usage.Tenant{{Name: "acme", Namespace: "tenant-acme"}}}
	var cpuSeconds, memSeconds float64
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		end := time.Now().Truncate(time.Second)
		r, err := engine.Report(ctx, scope, usage.Period{Start: start, End: end, Step: end.Sub(start)})
		if err != nil || len(r.Consumers) == 0 {
			return false, nil
		}
		c, _ := strconv.ParseFloat(r.Total.VCPUHours, 64)
		m, _ := strconv.ParseFloat(r.Total.MemoryGiBHours, 64)
		cpuSeconds, memSeconds = c*3600, m*3600
		return cpuSeconds >= 5*cpu, nil // five samples at least
	}); err != nil {
		t.Fatalf("no report of the pod's usage: %v", err)
	}
	// Every sample counts one second at the effective requests: a whole number of seconds.
	seconds := cpuSeconds / cpu
	if math.Abs(seconds-math.Round(seconds)) > 1e-6 || math.Abs(memSeconds/memGiB-seconds) > 1e-6 {
		t.Errorf("%.6f core-seconds and %.6f GiB-seconds: not whole seconds of %v cores and %v GiB", cpuSeconds, memSeconds, cpu, memGiB)
	}
}
