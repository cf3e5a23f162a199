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
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
	rounds      = 3
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
// client-go's dynamic client at the same parallelism (the median of `rounds` paired rounds); the
// controller's API writes in the 60 s after; and the memory of the process the controller runs in.
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
	for round := range rounds {
		for i := range clusters {
			for _, side := range []string{"base", "ctl"} {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace(side, round, i), Labels: map[string]string{tenancyv1.LabelEtcd: "etcd"}}}
				check(b, env.Client.Create(ctx, ns))
			}
		}
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	check(b, err)

	// Each round creates the objects directly, then starts a controller and has it make them for
	// as many new clusters. The baseline runs with no controller watching, as in the first round.
	b.ResetTimer()
	var perCluster atomic.Int64
	var direct, controller []time.Duration
	var c *running
	var heap uint64
	var rss string
	for round := range rounds {
		start := time.Now()
		parallel(clusters, func(i int) error {
			kc := makeCluster(namespace("base", round, i))
			kc.UID = types.UID(fmt.Sprintf("uid-%d-%d", round, i))
			n, err := baseline(ctx, dyn, kc)
			perCluster.Store(int64(n))
			return err
		})
		direct = append(direct, time.Since(start))

		// A new controller first reconciles the clusters of the earlier rounds (converged: it
		// writes nothing), then the timer starts.
		c = startController(ctx, b, env.Config, scheme, round)
		for c.reconciled.Load() < int64(round*clusters) {
			time.Sleep(20 * time.Millisecond)
		}
		c.settle()
		start = time.Now()
		parallel(clusters, func(i int) error { return env.Client.Create(ctx, makeCluster(namespace("ctl", round, i))) })
		for c.made.Load() < int64(clusters)*perCluster.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		controller = append(controller, time.Since(start))
		if round == 0 { // the memory at `clusters` clusters (and the baseline's objects of as many)
			c.settle()
			heap, rss = memory()
		}
		if round < rounds-1 {
			c.stop()
		}
	}
	b.StopTimer()
	defer c.stop()

	// Let the reconciles the applies themselves caused finish (their status writes are part of
	// converging), then count what the next 60 s write.
	c.settle()
	before := c.writes.Load()
	time.Sleep(quietPeriod)
	quiet := c.writes.Load() - before

	ratios, perRound := make([]float64, rounds), make([]string, rounds)
	for i := range rounds {
		ratios[i] = controller[i].Seconds() / direct[i].Seconds()
		perRound[i] = fmt.Sprintf("%.2f (%.1f s / %.1f s)", ratios[i], controller[i].Seconds(), direct[i].Seconds())
	}
	ratio := testenv.Median(ratios)
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(float64(quiet), "writes/60s")
	body := fmt.Sprintf(`%d clusters of one node group, the base add-ons and the cloud controllers (%d owned objects each, and the add-ons' access Secret), on one local kube-apiserver with the Cluster API, CAPK and Kamaji-provider CRDs; the controller at --concurrency %d, in process. %d rounds, each the baseline then a newly started controller with as many new clusters; times are medians of the rounds, the ratio the median of the rounds' own ratios.

| figure | value | goal |
|---|---|---|
| all owned objects applied, controller | %s | |
| the same objects created directly (client-go dynamic client, %d in parallel) | %s | |
| ratio (per round: %s) | %.2f× | ≤ 1.5× |
| controller API writes in the %s after convergence | %d | 0 |
| Go heap in use after GC, after the first round (controller + its caches + the benchmark) | %d MiB | |
| process RSS then (controller + the benchmark harness) | %s | |

The controller's time, each round, includes creating the %d KubernetesClusters (the finalizer added at admission by the chart's policy), its status writes, and reading back what it applied (every object is applied only if it differs from the cache).
`, clusters, perCluster.Load(), workers, rounds, testenv.Median(controller).Round(time.Millisecond), workers, testenv.Median(direct).Round(time.Millisecond), strings.Join(perRound, ", "), ratio, quietPeriod, quiet, heap>>20, rss, clusters)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		check(b, testenv.WriteBenchSection(out, "cluster-controller", body))
	}
	b.Log("\n" + body)
}

// running is a controller started for one round.
type running struct {
	writes, reconciled *atomic.Int64 // its API writes, counted at its transport; its reconciles
	made               *atomic.Int64 // the owned objects of its round's clusters its cache saw appear (countOwned)
	stop               func()
}

// startController starts the controller in a new manager, and waits for its cache.
func startController(ctx context.Context, b *testing.B, env *rest.Config, scheme *k8sruntime.Scheme, round int) *running {
	c := &running{writes: &atomic.Int64{}, reconciled: &atomic.Int64{}}
	cfg := rest.CopyConfig(env)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				c.writes.Add(1)
			}
			return rt.RoundTrip(req)
		})
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // one manager a round
		Client:     client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Cache:      cache.Options{ByObject: kubernetescluster.CacheByObject(options.InfraNamespace)}})
	check(b, err)
	r := &kubernetescluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: options, Concurrency: workers}
	check(b, r.SetupWithManagerAs(mgr, reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if strings.HasPrefix(req.Namespace, "ctl-") { // not the baseline's objects' owners, which do not exist
			defer c.reconciled.Add(1)
		}
		return r.Reconcile(ctx, req)
	})))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	c.stop = func() { cancel(); <-done }
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		b.Fatal("cache did not sync")
	}
	c.made = countOwned(mctx, b, mgr.GetCache(), fmt.Sprintf("ctl-%d-", round))
	return c
}

// settle waits until the controller has written nothing for 2 s.
func (c *running) settle() {
	for settled, last := 0, c.writes.Load(); settled < 10; time.Sleep(200 * time.Millisecond) {
		if n := c.writes.Load(); n == last {
			settled++
		} else {
			settled, last = 0, n
		}
	}
}

func namespace(side string, round, i int) string { return fmt.Sprintf("%s-%d-%d", side, round, i) }

// countOwned counts the owned objects of the clusters in the namespaces named prefix… as the
// manager's informers, which watch what the controller owns, see them appear: in the clusters'
// namespaces, and in the infrastructure namespace (labelled with their namespace there). That
// costs a label lookup per event. Listing the cache every 20 ms instead took a fifth of the
// process's CPU in this phase (1.3 s of 5.9 s in a profile), taken from the two cores the
// controller and kube-apiserver share.
func countOwned(ctx context.Context, b *testing.B, c cache.Cache, prefix string) *atomic.Int64 {
	var n atomic.Int64
	for _, gvk := range append(slices.Clone(kubernetescluster.Owned), cluster.InfraKinds...) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		informer, err := c.GetInformer(ctx, u)
		check(b, err)
		_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			o, ok := obj.(client.Object)
			if !ok || o.GetLabels()[clusterapi.LabelCluster] != "k8s" {
				return
			}
			ns := o.GetNamespace()
			if ns == options.InfraNamespace {
				ns = o.GetLabels()[clusterapi.LabelClusterNamespace]
			}
			if strings.HasPrefix(ns, prefix) {
				n.Add(1)
			}
		}})
		check(b, err)
	}
	return &n
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

// memory is the heap in use after a GC, and the process's resident set.
func memory() (uint64, string) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, vmRSS()
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
