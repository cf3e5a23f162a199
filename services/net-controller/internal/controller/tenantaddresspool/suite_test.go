package tenantaddresspool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/loadbalancerpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantaddresspool"
	ts "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
)

// The suite runs the real reconcilers against a real kube-apiserver and etcd, with the chart's CRDs
// and MetalLB's published CRDs (test/crds/metallb), kube-controller-manager's resourcequota
// controller, without which kube-apiserver cannot enforce a tenant's quota, and MetalLB's own
// controller (built by libs/builder from go.universe.tf/metallb), which gives LoadBalancer
// Services their addresses from the IPAddressPools the net-controller writes. No speaker runs:
// nothing is announced.
var (
	env *testenv.Env
	k8s client.WithWatch
)

// metallbNS is MetalLB's namespace in the suite.
const metallbNS = "metallb-system"

// metallbLog is where MetalLB's controller logs.
var metallbLog string

func TestMain(m *testing.M) { ts.Main(m, run) }

func run(m *testing.M) (int, error) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	var err error
	env, err = testenv.Start(testenv.Options{
		CRDDirs: []string{ts.ChartCRDs(), ts.MetalLBCRDs()}, Scheme: s, ControllerManager: true,
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: s}); err != nil {
		return 0, err
	}
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metallbNS}}); err != nil {
		return 0, err
	}
	if err := startMetalLB(); err != nil {
		return 0, err
	}
	stop, err := startManager()
	if err != nil {
		return 0, err
	}
	defer stop()
	code := m.Run()
	if log, err := os.ReadFile(metallbLog); code != 0 && err == nil {
		fmt.Fprintf(os.Stderr, "--- metallb-controller log (last 8 KiB):\n%s\n", log[max(0, len(log)-8192):])
	}
	if code == 0 {
		_ = os.RemoveAll(filepath.Dir(metallbLog))
	}
	return code, nil
}

// startManager runs the reconcilers as the binary does with --metallb-namespace.
func startManager() (func(), error) {
	return ts.StartManager(env.Config, env.Client.Scheme(), func(mgr ctrl.Manager) error {
		if err := (&tenantaddresspool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: metallbNS}).
			SetupWithManager(mgr, 4); err != nil {
			return err
		}
		return (&loadbalancerpool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: metallbNS}).SetupWithManager(mgr)
	})
}

// startMetalLB runs MetalLB's controller (no webhook, no metrics) on MetalLB's namespace.
func startMetalLB() error {
	bin, err := testenv.BinDir()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(bin, "metallb-controller")); err != nil {
		return fmt.Errorf("MetalLB's controller is not built (run make tools): %w", err)
	}
	logDir, err := os.MkdirTemp("", "metallb-")
	if err != nil {
		return err
	}
	metallbLog = filepath.Join(logDir, "metallb-controller.log")
	return env.StartProcess("metallb-controller", logDir, nil, "--namespace="+metallbNS, "--webhook-mode=disabled",
		"--port=0", "--disable-cert-rotation", "--log-level=info")
}
