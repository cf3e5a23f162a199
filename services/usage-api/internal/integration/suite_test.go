package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/apiserver"
)

var (
	repoRoot = filepath.Join("..", "..", "..", "..")
	env      *testenv.Env
	kube     client.Client
	vm       *testenv.VictoriaMetrics
	// t0 is the start of the history in VictoriaMetrics: two hours ago, on the minute.
	t0 = time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	// scheme is the admin client's: the tenants, the apps' HelmReleases and UsageReports.
	scheme = runtime.NewScheme()
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, tenancyv1.AddToScheme,
		helmv2.AddToScheme, usagev1.AddToScheme, apiregistrationv1.AddToScheme} {
		utilruntime.Must(add(scheme))
	}
}

func TestMain(m *testing.M) { testenv.Main(m, run) }

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "usage-api-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	flux, err := testenv.ModuleCRDDirs("github.com/fluxcd/helm-controller@v1.6.4")
	if err != nil {
		return 0, err
	}
	env, err = testenv.Start(testenv.Options{
		CRDDirs:           append(flux, filepath.Join(repoRoot, "deploy", "charts", "tenant-controller", "crds")),
		Aggregation:       true,
		ControllerManager: true, // role aggregation
		Scheme:            scheme,
	})
	if err != nil {
		return 0, err
	}
	defer env.Stop()
	kube = env.Client
	for _, f := range []string{"deploy/charts/tenant-controller/templates/tenant-roles.yaml", "deploy/charts/usage-api/templates/tenant-roles.yaml"} {
		if err := testenv.ApplyFile(ctx, kube, filepath.Join(repoRoot, f)); err != nil {
			return 0, err
		}
	}
	if err := startTenantController(ctx, dir); err != nil {
		return 0, err
	}
	if vm, err = testenv.StartVictoriaMetrics(dir, testenv.VictoriaMetricsOptions{}); err != nil {
		return 0, err
	}
	defer func() { vm.Stop() }()
	if err := startUsageAPI(ctx, dir); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// startTenantController builds and runs the real tenant-controller (without its webhooks) and
// makes the root tenant's namespace, as the tenant-controller's chart does.
func startTenantController(ctx context.Context, dir string) error {
	bin := filepath.Join(dir, "tenant-controller")
	if err := testenv.BuildProgram(ctx, filepath.Join(repoRoot, "services", "tenant-controller"), "./cmd", bin); err != nil {
		return err
	}
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootNamespace}}); err != nil {
		return err
	}
	return env.StartBinary(bin, dir, nil, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--webhook-port=0")
}

// startUsageAPI serves usage.flotilla.dev in-process on a free port, as cmd/main.go does,
// registers its APIService and waits until kube-apiserver reports it Available.
func startUsageAPI(ctx context.Context, dir string) error {
	kubeconfig, err := env.AdminKubeconfig("usage-api", dir)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	opts := apiserver.NewOptions()
	opts.SecureServing.Listener = l
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.SecureServing.BindPort = port
	opts.SecureServing.ServerCert.CertDirectory = dir
	opts.Authentication.RemoteKubeConfigFile = kubeconfig
	opts.Authorization.RemoteKubeConfigFile = kubeconfig
	opts.Usage.URL = vm.URL
	opts.Retention = 24 * time.Hour
	srv, err := apiserver.New(opts, env.Config)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "usage-api:", err)
		}
	}()
	if err := testenv.WaitServing(ctx, port); err != nil {
		return err
	}
	if err := testenv.RegisterAPIService(ctx, kube, "flotilla-system", usagev1.GroupVersion.Group, usagev1.GroupVersion.Version, port); err != nil {
		return err
	}
	return testenv.WaitAPIServiceAvailable(ctx, kube, apiserver.APIServiceName)
}

// freePort is a free local port.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// scrapingStore starts a VictoriaMetrics in dir scraping target (a scrape config's job body:
// scheme, path, static_configs) every second under job, stopped with the test.
func scrapingStore(t *testing.T, dir, job, target string) *testenv.VictoriaMetrics {
	t.Helper()
	store, err := testenv.StartVictoriaMetrics(dir, testenv.VictoriaMetricsOptions{ScrapeConfig: fmt.Sprintf(
		"scrape_configs:\n  - job_name: %s\n    scrape_interval: 1s\n%s", job, target)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Stop)
	return store
}

// scrapeState says what a failing test's scraping looked like: VictoriaMetrics' view of its
// targets (health, last error) and the end of the exporter's log.
func scrapeState(store *testenv.VictoriaMetrics, dir, exporter string) string {
	var sb strings.Builder
	if resp, err := http.Get(store.URL + "/api/v1/targets"); err != nil {
		fmt.Fprintf(&sb, "targets: %v\n", err)
	} else {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		fmt.Fprintf(&sb, "targets: %s\n", body)
	}
	log, err := os.ReadFile(filepath.Join(dir, exporter+".log"))
	if err != nil {
		fmt.Fprintf(&sb, "%s log: %v\n", exporter, err)
	}
	if len(log) > 4<<10 {
		log = log[len(log)-4<<10:]
	}
	fmt.Fprintf(&sb, "%s log (end):\n%s", exporter, log)
	return sb.String()
}
