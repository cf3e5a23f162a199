package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver/apiservertest"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/appidentity"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/appworkloads"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/catalogsource"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/definition"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/deliverysource"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/tenantservice"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The suite runs the real control plane (etcd, kube-apiserver with its aggregator), the real Flux
// source-controller and helm-controller, a loopback Helm repository serving the starter catalog's
// charts, and this package's apps apiserver, registered through an APIService.
var (
	env        *testenv.Env
	kube       client.Client
	apps       dynamic.Interface
	kubeconfig string
	repoRoot   = filepath.Join("..", "..", "..", "..")
	// restartApps stops the apps apiserver (stopApps) and starts a new one on another port.
	restartApps func() error
	stopApps    context.CancelFunc
	// appsLag delays every chunk of every watch the apps apiserver has open on kube-apiserver, by
	// nanoseconds, while it is set: its cache then lags behind etcd, as under load.
	appsLag atomic.Int64
)

type laggingWatches struct{ http.RoundTripper }

func (l laggingWatches) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.RoundTripper.RoundTrip(r)
	if err == nil && r.URL.Query().Get("watch") == "true" {
		resp.Body = laggingBody{resp.Body}
	}
	return resp, err
}

type laggingBody struct{ io.ReadCloser }

func (b laggingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		time.Sleep(time.Duration(appsLag.Load()))
	}
	return n, err
}

const catalogNamespace = apiservertest.Namespace

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.Level(zapLevel()))))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "flotilla-apps-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := setup(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		if env != nil {
			_ = env.Stop()
		}
		return 1
	}
	code := m.Run()
	cancel()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}
	return code
}

func setup(ctx context.Context, dir string) error {
	modules, err := testenv.ModuleCRDDirs(append(testenv.FluxModules, cnpgModule)...)
	if err != nil {
		return err
	}
	for _, add := range []func(*runtime.Scheme) error{sourcev1.AddToScheme, tenancyv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(apiserver.Scheme); err != nil {
			return err
		}
	}
	env, err = testenv.Start(testenv.Options{
		CRDDirs: append(modules,
			filepath.Join(repoRoot, "deploy", "charts", "app-catalog-controller", "crds"),
			filepath.Join(repoRoot, "deploy", "charts", "tenant-controller", "crds"),
			filepath.Join("testdata", "crds")),
		Aggregation:       true,
		ControllerManager: true, // garbage collection and role aggregation
		Scheme:            apiserver.Scheme,
	})
	if err != nil {
		return err
	}
	kube = env.Client
	// The tenant roles, and the policy that holds each app's identity to its own release, as the
	// tenant-controller's chart installs them.
	for _, f := range []string{"tenant-roles.yaml", "app-identity-policy.yaml"} {
		if err := testenv.ApplyFile(ctx, kube, filepath.Join(repoRoot, "deploy", "charts", "tenant-controller", "templates", f)); err != nil {
			return err
		}
	}
	// What the starter catalog's charts create beyond the core kinds, granted to the tenants'
	// delivery identity, as the catalog's kustomization installs it.
	if err := testenv.ApplyFile(ctx, kube, filepath.Join(repoRoot, "deploy", "catalog", "delivery-roles.yaml")); err != nil {
		return err
	}
	if err := startTenantController(ctx, dir); err != nil {
		return err
	}
	if err := env.StartFlux(ctx, dir); err != nil {
		return err
	}
	charts, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "catalog", "*", "chart"))
	if err != nil {
		return err
	}
	repoDir := filepath.Join(dir, "charts")
	if err := os.MkdirAll(repoDir, 0o700); err != nil {
		return err
	}
	repo, err := testenv.ServeCharts(repoDir, 0, charts...)
	if err != nil {
		return err
	}
	if err := testenv.ApplyFile(ctx, kube, filepath.Join(repoRoot, "deploy", "catalog", "namespace.yaml")); err != nil {
		return err
	}
	source := &sourcev1.HelmRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "flotilla-catalog", Namespace: catalogNamespace},
		Spec:       sourcev1.HelmRepositorySpec{URL: repo.URL, Interval: metav1.Duration{Duration: 10 * time.Minute}},
	}
	if err := kube.Create(ctx, source); err != nil {
		return err
	}

	if kubeconfig, err = env.AdminKubeconfig("kubectl", dir); err != nil {
		return err
	}
	if err := startController(ctx); err != nil {
		return err
	}
	restartApps = func() error {
		if stopApps != nil {
			stopApps()
		}
		appsCtx, cancel := context.WithCancel(ctx)
		stopApps = cancel
		lagging := rest.CopyConfig(env.Config)
		lagging.Wrap(func(rt http.RoundTripper) http.RoundTripper { return laggingWatches{rt} })
		_, err := apiservertest.StartWith(appsCtx, env, dir, lagging)
		return err
	}
	if err := restartApps(); err != nil {
		return err
	}
	if apps, err = dynamic.NewForConfig(env.Config); err != nil {
		return err
	}
	return nil
}

// startTenantController builds and runs the real tenant-controller (without its admission
// webhook), as make demo does: the tenants apps are ordered in are real, with their namespaces,
// role bindings and delivery namespaces. The root tenant's namespace is made first, as a platform
// admin does.
func startTenantController(ctx context.Context, dir string) error {
	bin := filepath.Join(dir, "tenant-controller")
	if err := testenv.BuildProgram(ctx, filepath.Join(repoRoot, "services", "tenant-controller"), "./cmd", bin); err != nil {
		return err
	}
	root := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootNamespace}}
	if err := kube.Create(ctx, root); err != nil {
		return err
	}
	return env.StartBinary(bin, dir, nil, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--webhook-port=0")
}

// cacheByObject is the manager's cache, as cmd/main.go sets it.
func cacheByObject() map[client.Object]cache.ByObject {
	by := definition.CacheByObject()
	maps.Copy(by, appworkloads.CacheByObject())
	maps.Copy(by, appidentity.CacheByObject())
	return by
}

// startController runs the catalog controller in-process, as cmd/main.go wires it.
func startController(ctx context.Context) error {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  apiserver.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{ByObject: cacheByObject()},
	})
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		return err
	}
	if err := (&definition.Reconciler{Client: mgr.GetClient(), Discovery: dc}).SetupWithManager(mgr); err != nil {
		return err
	}
	// The catalog's credentials are kept in its own namespace, as the chart's default.
	secrets, err := deliverysource.SecretsCache(mgr, []string{catalogNamespace})
	if err != nil {
		return err
	}
	if err := (&deliverysource.Reconciler{Client: mgr.GetClient(), Secrets: secrets}).SetupWithManager(mgr, secrets); err != nil {
		return err
	}
	if err := (&tenantservice.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&appworkloads.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&appidentity.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	fetcher := &catalogsource.Fetcher{HTTP: http.DefaultClient, MaxSize: 10 << 20}
	if err := (&catalogsource.Reconciler{Client: mgr.GetClient(), Fetcher: fetcher}).SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
		}
	}()
	return nil
}

// cnpgModule provides the real CloudNativePG CRDs the Postgres chart's Cluster needs.
const cnpgModule = "github.com/cloudnative-pg/cloudnative-pg@v1.27.1"

func zapLevel() int8 {
	if os.Getenv("TEST_VERBOSE") != "" {
		return -2
	}
	return 1
}

// kubectl runs the real kubectl as the admin, or as user (impersonated) when given.
func kubectl(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	return kubectlEnv(t, nil, stdin, args...)
}

// kubectlEnv is kubectl with extra environment variables (KUBE_EDITOR, say).
func kubectlEnv(t testing.TB, env []string, stdin string, args ...string) (string, error) {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	// A fresh discovery cache per call: kubectl's cache would hide kinds added since.
	cmd := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--cache-dir", t.TempDir()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
	}
}
