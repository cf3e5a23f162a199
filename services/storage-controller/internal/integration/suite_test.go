package integration_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/controller/policy"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/controller/schedulingclass"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/extender"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble/csistandin"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble/openapicheck"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/webhook"
)

// The suite runs the real reconciler against a real kube-apiserver and etcd, with the chart's
// CRDs, and a LINSTOR test double of each test's own (ownLINSTOR) behind the OpenAPI checker:
// every request the controller sends is checked against LINSTOR's published API.
var (
	env *testenv.Env
	k8s client.Client
	// linstorAt serves the running test's LINSTOR at the one address every client uses, linstorSrv.
	linstorAt  = &switchedHandler{}
	linstorSrv *httptest.Server
	checker    *openapicheck.Checker
	lc         *linstor.Client
	// raw is golinstor without the checker, for what a test does in LINSTOR itself (as the CSI
	// driver would: spawning volumes).
	raw         *lapi.Client
	view        *linstor.View
	extenderURL string
	// webhookConfig is the claim webhook's ValidatingWebhookConfiguration.
	webhookConfig string
	chartDir      = filepath.Join("..", "..", "..", "..", "deploy", "charts", "storage-controller")
)

const gib = 1024 * 1024 // KiB

func TestMain(m *testing.M) { testenv.Main(m, run) }

func run(m *testing.M) (int, error) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = storagepolicyv1.AddToScheme(scheme)
	var err error
	hooks, err := testenv.ReadWebhooks(filepath.Join(chartDir, "files", "manifests.yaml"))
	if err != nil {
		return 0, err
	}
	mutating, err := testenv.ReadMutatingWebhooks(filepath.Join(chartDir, "files", "manifests.yaml"))
	if err != nil {
		return 0, err
	}
	for _, m := range mutating { // as the chart installs them
		for i := range m.Webhooks {
			w := &m.Webhooks[i]
			op := metav1.LabelSelectorOpExists
			if w.Name == webhook.AnnotatedPods {
				op = metav1.LabelSelectorOpDoesNotExist
				w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "classed-pods", Expression: webhook.PodMatchCondition}}
			}
			w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: storagepolicyv1.LabelNamespaceSchedulingClass, Operator: op}}}
		}
	}
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join(chartDir, "crds")}, Webhooks: hooks, MutatingWebhooks: mutating, Scheme: scheme,
		// Role aggregation (the tenant roles), and claims protected while pods use them, as in a cluster.
		ControllerManager: true})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client
	ctx0 := context.Background()
	for _, f := range []string{
		filepath.Join(chartDir, "templates", "scheduling-gate-policy.yaml"),
		// The tenant roles, for the tests in a tenant administrator's seat.
		filepath.Join(chartDir, "..", "tenant-controller", "templates", "tenant-roles.yaml"),
	} {
		if err := testenv.ApplyFile(ctx0, k8s, f); err != nil {
			return 0, err
		}
	}

	linstorAt.serve(newLINSTOR().Handler())
	srv := httptest.NewServer(linstorAt)
	defer srv.Close()
	linstorSrv = srv
	if checker, err = openapicheck.New(srv.URL); err != nil {
		return 0, err
	}
	base, _ := url.Parse(srv.URL)
	lc, err = linstor.NewWithHTTPClient(base, &http.Client{Transport: checker.Transport(http.DefaultTransport), Timeout: 2 * time.Second}, ctrl.Log)
	if err != nil {
		return 0, err
	}

	if raw, err = lapi.NewClient(lapi.BaseURL(base), lapi.Log(discard{})); err != nil {
		return 0, err
	}
	o := env.WebhookInstallOptions
	webhookConfig = hooks[0].Name
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir,
		}),
		Cache: cache.Options{ByObject: func() map[client.Object]cache.ByObject {
			m := policy.CacheByObject(webhookConfig)
			m[&corev1.Pod{}] = schedulingclass.PodCache()
			return m
		}()},
	})
	if err != nil {
		return 0, err
	}
	view = linstor.NewView(lc, 200*time.Millisecond, ctrl.Log)
	if err := mgr.Add(view); err != nil {
		return 0, err
	}
	r := &policy.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), LINSTOR: lc, View: view,
		Recorder: mgr.GetEventRecorder("storage-controller"), Retry: time.Second, WebhookConfiguration: webhookConfig}
	if err := r.SetupWithManager(mgr); err != nil {
		return 0, err
	}
	if err := (&webhook.ClaimValidator{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), View: view}).SetupWithManager(mgr); err != nil {
		return 0, err
	}
	if err := (&webhook.PodPlacer{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return 0, err
	}
	if err := (&schedulingclass.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return 0, err
	}
	// The stand-in for the LINSTOR CSI driver's provisioning and the PV binder, through the checker.
	checked, err := lapi.NewClient(lapi.BaseURL(base), lapi.HTTPClient(&http.Client{Transport: checker.Transport(http.DefaultTransport)}), lapi.Log(discard{}))
	if err != nil {
		return 0, err
	}
	if err := (&csistandin.Provisioner{Client: mgr.GetClient(), LINSTOR: checked}).SetupWithManager(mgr); err != nil {
		return 0, err
	}
	if err := (&schedulingclass.HeldPods{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("storage-controller")}).SetupWithManager(mgr); err != nil {
		return 0, err
	}
	// The real kube-scheduler, with the extender as a deployment configures it.
	x := httptest.NewServer((&extender.Extender{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), View: view, ZoneKey: "topology.kubernetes.io/zone"}).Handler())
	defer x.Close()
	extenderURL = x.URL
	dir, err := os.MkdirTemp("", "storage-scheduler-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if _, err := env.StartScheduler(dir, testenv.SchedulerOptions{Extenders: []schedconfigv1.Extender{ExtenderConfig(x.URL)}, PercentageOfNodesToScore: 100}); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := wait.PollUntilContextCancel(wctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return mgr.GetWebhookServer().StartedChecker()(nil) == nil, nil
	}); err != nil {
		return 0, fmt.Errorf("the webhook server did not start: %w", err)
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		return 0, err
	}
	if v := checker.Violations(); len(v) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "requests or responses outside LINSTOR's API:\n%v\n", v)
		return 1, nil
	}
	return code, nil
}

// testLINSTOR is one test's LINSTOR: the double and the clock of its auto-diskful.
type testLINSTOR struct {
	*linstordouble.Double
	Clock *testingclock.FakeClock
}

// newLINSTOR is a LINSTOR as every test starts with it: three satellites in zones a, b and c
// (Aux/disk=ssd), each with an empty 100Gi thin pool ssd, no resource group, no volume, no fault.
func newLINSTOR() *testLINSTOR {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := linstordouble.New(linstordouble.Options{Seed: 1, Clock: clk})
	for i, zone := range []string{"a", "b", "c"} {
		d.AddNode(fmt.Sprintf("node-%d", i+1), map[string]string{"Aux/topology.kubernetes.io/zone": zone, "Aux/disk": "ssd"},
			linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 100 * gib, FreeKiB: 100 * gib})
	}
	return &testLINSTOR{Double: d, Clock: clk}
}

// ownLINSTOR gives the test a new LINSTOR (newLINSTOR) at the address the controller, its view,
// the CSI stand-in and the tests' clients use. Every test that makes policies, claims or volumes
// calls it first: what an earlier test left in LINSTOR (volumes, used or changed capacity, resource
// groups, faults, request counts) is then in no later test's way. When it returns, the view has
// polled the new LINSTOR, so that nothing the controller decides from then on comes from an
// earlier test's.
func ownLINSTOR(t *testing.T) *testLINSTOR {
	t.Helper()
	l := newLINSTOR()
	linstorAt.serve(l.Handler())
	view.Refresh(context.Background())
	return l
}

// linstorOutage takes LINSTOR's endpoint down for real: the port refuses connections and the open
// ones are closed, until restore listens at the same address again.
func linstorOutage(t *testing.T) (restore func()) {
	t.Helper()
	addr := linstorSrv.Listener.Addr().String()
	if err := linstorSrv.Listener.Close(); err != nil {
		t.Fatal(err)
	}
	linstorSrv.CloseClientConnections()
	return func() {
		t.Helper()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening again at %s: %v", addr, err)
		}
		linstorSrv.Listener = l
		go func() { _ = linstorSrv.Config.Serve(l) }()
	}
}

// unseeingCache is a started cache of the test's API server that sees no object, as the manager's
// cache has not seen one created moments ago.
func unseeingCache(t *testing.T) cache.Cache {
	t.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: k8s.Scheme(),
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{"seen-by": "nobody"})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not start")
	}
	return c
}

// switchedHandler serves whichever LINSTOR the running test owns.
type switchedHandler struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *switchedHandler) serve(h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
}

func (s *switchedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s (last error: %v)", what, timeout, last)
	}
}

// ExtenderConfig is the extender's entry in a KubeSchedulerConfiguration, as docs/operations.md
// tells a platform team to write it.
func ExtenderConfig(url string) schedconfigv1.Extender {
	return schedconfigv1.Extender{
		URLPrefix: url, FilterVerb: "filter", PrioritizeVerb: "prioritize", Weight: 5,
		NodeCacheCapable: true, Ignorable: true, HTTPTimeout: metav1.Duration{Duration: 2 * time.Second},
	}
}
