package integration_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

var (
	env      *testenv.Env
	k8s      client.Client
	writes   = &writeCounter{}
	counter  = &reconcileCounter{done: map[types.NamespacedName]int{}}
	chartDir = filepath.Join("..", "..", "..", "..", "deploy", "charts", "cluster-controller")
	kamaji   = filepath.Join("..", "..", "test", "crds", "kamaji")
	// CDI's DataVolume, which the clusters' CSI controllers make (generated from CDI's API types).
	cdi = filepath.Join("..", "..", "test", "crds", "cdi")
	// The storage-controller's CRDs: SchedulingClass, which a cluster may name.
	storageCRDs = filepath.Join(chartDir, "..", "storage-controller", "crds")
	// infraNamespace is where the clusters' infrastructure controllers run, as the chart sets it.
	infraNamespace = "flotilla-cluster-infra"
	// options are the reconciler's: the defaults (the base add-ons among them), with the chart's
	// infrastructure namespace.
	options = cluster.DefaultOptions()
)

// Modules whose CRDs the suite installs, at the versions go.mod pins.
const (
	capiModule = "sigs.k8s.io/cluster-api@v1.13.6"
	capkModule = "sigs.k8s.io/cluster-api-provider-kubevirt@v0.11.2"
)

// contractLabels are the Cluster API contract labels the providers' kustomizations put on their
// CRDs (the CRD files in the modules carry none).
var contractLabels = map[string]map[string]string{
	"kubevirtclusters.infrastructure.cluster.x-k8s.io":         {"cluster.x-k8s.io/v1beta1": "v1alpha1"},
	"kubevirtmachines.infrastructure.cluster.x-k8s.io":         {"cluster.x-k8s.io/v1beta1": "v1alpha1"},
	"kubevirtmachinetemplates.infrastructure.cluster.x-k8s.io": {"cluster.x-k8s.io/v1beta1": "v1alpha1"},
	"kamajicontrolplanes.controlplane.cluster.x-k8s.io":        {"cluster.x-k8s.io/v1beta2": "v1alpha2"},
	"kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io":        {"cluster.x-k8s.io/v1beta2": "v1beta2"},
	"kubeadmconfigs.bootstrap.cluster.x-k8s.io":                {"cluster.x-k8s.io/v1beta2": "v1beta2"},
}

// writeCounter counts the controller's API writes (POST, PUT, PATCH, DELETE).
type writeCounter struct {
	n    atomic.Int64
	mu   sync.Mutex
	last []string
}

// recent returns the last writes, for a failure message.
func (w *writeCounter) recent() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.last...)
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			w.n.Add(1)
			w.mu.Lock()
			w.last = append(w.last, req.Method+" "+req.URL.Path)
			if len(w.last) > 10 {
				w.last = w.last[1:]
			}
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// reconcileCounter counts finished reconciles per cluster, so that a test can wait for "the
// controller looked again" without waiting for a time.
type reconcileCounter struct {
	mu   sync.Mutex
	done map[types.NamespacedName]int
}

func (c *reconcileCounter) wrap(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		c.mu.Lock()
		c.done[req.NamespacedName]++
		c.mu.Unlock()
		return res, err
	})
}

func (c *reconcileCounter) count(key types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done[key]
}

func TestMain(m *testing.M) { testenv.Main(m, run) }

func run(m *testing.M) (int, error) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = clusterapi.AddToScheme(scheme)
	_ = storagepolicyv1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	dirs, err := testenv.ModuleCRDDirs(append([]string{capiModule, capkModule}, testenv.FluxModules...)...)
	if err != nil {
		return 0, err
	}
	// The kubeadm bootstrap provider's CRDs are in the cluster-api module too.
	kubeadm := filepath.Join(dirs[0], "..", "..", "..", "bootstrap", "kubeadm", "config", "crd", "bases")
	env, err = testenv.Start(testenv.Options{CRDDirs: append(dirs, kubeadm, kamaji, cdi, storageCRDs, filepath.Join(chartDir, "crds")), Scheme: scheme})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, labels := range contractLabels {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
			return 0, err
		}
		p := client.MergeFrom(crd.DeepCopy())
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		for k, v := range labels {
			crd.Labels[k] = v
		}
		if err := k8s.Patch(ctx, crd, p); err != nil {
			return 0, err
		}
	}
	// The finalizer, added at admission as the chart installs it.
	if err := testenv.ApplyFile(ctx, k8s, filepath.Join(chartDir, "templates", "finalizer-policy.yaml")); err != nil {
		return 0, err
	}
	if err := testenv.WaitAdmitted(ctx, k8s, func() client.Object { return makeCluster("default", "probe").obj() }, kubernetescluster.HasFinalizer); err != nil {
		return 0, err
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: infraNamespace}}); err != nil {
		return 0, err
	}
	// The controller's writes are counted at its transport: every request that is not a read.
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return writes.wrap(rt) }
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: kubernetescluster.ClientCacheOptions()},
		Cache:   cache.Options{ByObject: kubernetescluster.CacheByObject(infraNamespace)},
	})
	if err != nil {
		return 0, err
	}
	options.InfraNamespace = infraNamespace
	r := &kubernetescluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: options, Retry: time.Second, Resync: 2 * time.Second}
	if err := r.SetupWithManagerAs(mgr, counter.wrap(r)); err != nil {
		return 0, err
	}
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	return code, <-errc
}
