package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// clusters is how many KubernetesClusters the run makes; BENCH_CLUSTERS overrides it.
var clusters = envInt("BENCH_CLUSTERS", 100)

const (
	workers     = 4 // the controller's default --concurrency, and the baseline's parallelism
	quietPeriod = 60 * time.Second
)

// options are the controller's: the defaults (the base add-ons among them), with each cluster's
// cloud controllers in the chart's infrastructure namespace.
var options = func() cluster.Options {
	o := cluster.DefaultOptions()
	o.InfraNamespace = "flotilla-cluster-infra"
	return o
}()

// baseline makes, directly, what the controller makes of kc: its desired objects, and the Secret
// the add-ons' ClusterResourceSet applies. It returns how many owned objects that is.
func baseline(ctx context.Context, dyn dynamic.Interface, kc *clusterapi.KubernetesCluster) (int, error) {
	objs, err := cluster.Desired(cluster.Inputs{Cluster: kc, DataStore: "flotilla-etcd", WorkerVersion: "v1.37.2"}, options)
	if err != nil {
		return 0, err
	}
	access, err := cluster.AddonsAccess(kc)
	if err != nil {
		return 0, err
	}
	raw, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(access)
	if err != nil {
		return 0, err
	}
	secret := &unstructured.Unstructured{Object: raw}
	secret.SetAPIVersion("v1")
	secret.SetKind("Secret")
	for _, o := range append(objs, secret) {
		gvr, _ := meta.UnsafeGuessKindToResource(o.GroupVersionKind())
		if _, err := dyn.Resource(gvr).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
	}
	return len(objs), nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func makeCluster(ns string) *clusterapi.KubernetesCluster {
	return &clusterapi.KubernetesCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "k8s", Namespace: ns},
		Spec: clusterapi.KubernetesClusterSpec{Version: "1.37", ControlPlane: clusterapi.ControlPlane{Replicas: 2},
			NodeGroups: []clusterapi.NodeGroup{{Name: "default", MinReplicas: 1, MaxReplicas: 3, InstanceType: "medium"}}},
	}
}

// BenchmarkClusters reports, in one run on one control plane: the time for the controller to apply
// every owned object of `clusters` clusters, against creating the same objects directly with
// client-go's dynamic client at the same parallelism; the controller's API writes in the 60 s after;
// and the memory of the process the controller runs in.
func BenchmarkClusters(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	scheme := k8sruntime.NewScheme()
	check(b, clientgoscheme.AddToScheme(scheme))
	check(b, clusterapi.AddToScheme(scheme))
	dirs, err := testenv.ModuleCRDDirs(append([]string{"sigs.k8s.io/cluster-api@v1.13.6", "sigs.k8s.io/cluster-api-provider-kubevirt@v0.11.2"}, testenv.FluxModules...)...)
	check(b, err)
	kubeadm := filepath.Join(dirs[0], "..", "..", "..", "bootstrap", "kubeadm", "config", "crd", "bases")
	env, err := testenv.Start(testenv.Options{Scheme: scheme, CRDDirs: append(dirs, kubeadm,
		filepath.Join("..", "..", "test", "crds", "kamaji"), filepath.Join("..", "..", "..", "..", "deploy", "charts", "cluster-controller", "crds"))})
	check(b, err)
	b.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	// The finalizer, added at admission as the chart installs it.
	check(b, testenv.ApplyFile(ctx, env.Client, filepath.Join("..", "..", "..", "..", "deploy", "charts", "cluster-controller", "templates", "finalizer-policy.yaml")))
	check(b, testenv.WaitAdmitted(ctx, env.Client, func() client.Object { return makeCluster("default") }, kubernetescluster.HasFinalizer))
	check(b, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: options.InfraNamespace}}))
	for i := range clusters {
		for _, prefix := range []string{"base", "ctl"} {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Labels: map[string]string{tenancyv1.LabelEtcd: "etcd"}}}
			check(b, env.Client.Create(ctx, ns))
		}
	}

	b.ResetTimer()
	// Baseline: the same objects, created directly.
	dyn, err := dynamic.NewForConfig(env.Config)
	check(b, err)
	start := time.Now()
	var perCluster atomic.Int64
	parallel(clusters, func(i int) error {
		kc := makeCluster(fmt.Sprintf("base-%d", i))
		kc.UID = types.UID(fmt.Sprintf("uid-%d", i))
		n, err := baseline(ctx, dyn, kc)
		perCluster.Store(int64(n))
		return err
	})
	direct := time.Since(start)

	// The controller, its writes counted at its transport.
	var writes atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				writes.Add(1)
			}
			return rt.RoundTrip(req)
		})
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Cache:  cache.Options{ByObject: kubernetescluster.CacheByObject(options.InfraNamespace)}})
	check(b, err)
	r := &kubernetescluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: options, Concurrency: workers}
	check(b, r.SetupWithManager(mgr))
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		b.Fatal("cache did not sync")
	}
	start = time.Now()
	parallel(clusters, func(i int) error { return env.Client.Create(ctx, makeCluster(fmt.Sprintf("ctl-%d", i))) })
	// Counted in the manager's cache, which watches what the controller owns, without copying:
	// listing them from kube-apiserver every 20 ms (the baseline's too, 1,400 objects at 100
	// clusters) would load it during this phase only, the more the more clusters.
	for owned(b, mgr.GetCache()) < clusters*int(perCluster.Load()) {
		time.Sleep(20 * time.Millisecond)
	}
	controller := time.Since(start)
	b.StopTimer()

	// Let the reconciles the applies themselves caused finish (their status writes are part of
	// converging), then count what the next 60 s write.
	for settled, last := 0, writes.Load(); settled < 10; time.Sleep(200 * time.Millisecond) {
		if n := writes.Load(); n == last {
			settled++
		} else {
			settled, last = 0, n
		}
	}
	before := writes.Load()
	time.Sleep(quietPeriod)
	quiet := writes.Load() - before
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	rss := vmRSS()

	ratio := controller.Seconds() / direct.Seconds()
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(float64(quiet), "writes/60s")
	body := fmt.Sprintf(`%d clusters of one node group, the base add-ons and the cloud controllers (%d owned objects each, and the add-ons' access Secret), on one local kube-apiserver with the Cluster API, CAPK and Kamaji-provider CRDs; the controller at --concurrency %d, in process.

| figure | value | goal |
|---|---|---|
| all owned objects applied, controller | %s | |
| the same objects created directly (client-go dynamic client, %d in parallel) | %s | |
| ratio | %.2f× | ≤ 1.5× |
| controller API writes in the %s after convergence | %d | 0 |
| Go heap in use after GC (controller + its caches + the benchmark) | %d MiB | |
| process RSS (controller + the benchmark harness) | %s | |

The controller's time includes creating the %d KubernetesClusters (the finalizer added at admission by the chart's policy), its status writes, and reading back what it applied (every object is applied only if it differs from the cache).
`, clusters, perCluster.Load(), workers, controller.Round(time.Millisecond), workers, direct.Round(time.Millisecond), ratio, quietPeriod, quiet, ms.HeapInuse>>20, rss, clusters)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		check(b, testenv.WriteBenchSection(out, "cluster-controller", body))
	}
	b.Log("\n" + body)
}

// owned counts the owned objects of the controller's clusters: in their namespaces, and in the
// infrastructure namespace (labelled with their namespace there).
func owned(b *testing.B, c client.Reader) int {
	n := 0
	for _, gvk := range append(slices.Clone(kubernetescluster.Owned), cluster.InfraKinds...) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		check(b, c.List(context.Background(), l, client.MatchingLabels{clusterapi.LabelCluster: "k8s"}, client.UnsafeDisableDeepCopy))
		for _, o := range l.Items {
			ns := o.GetNamespace()
			if ns == options.InfraNamespace {
				ns = o.GetLabels()[clusterapi.LabelClusterNamespace]
			}
			if strings.HasPrefix(ns, "ctl-") {
				n++
			}
		}
	}
	return n
}

func parallel(n int, f func(int) error) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		panic(err)
	}
}

func vmRSS() string {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "unknown"
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
