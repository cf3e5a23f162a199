package tenantsubnet_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/subnetpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantsubnet"
)

// The suite runs the real reconcilers against a real kube-apiserver and etcd, with the chart's
// CRDs and Kube-OVN's own CRDs (from the kube-ovn module this service builds against). No Kube-OVN
// controller runs: the tests play its part where one is needed (IP objects holding addresses).
var (
	env      *testenv.Env
	k8s      client.WithWatch
	chartDir = filepath.Join("..", "..", "..", "..", "..", "deploy", "charts", "net-controller")
)

func TestMain(m *testing.M) {
	flag.Parse()
	level := zapcore.ErrorLevel
	if testing.Verbose() {
		level = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(level)))
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	_ = kubeovnv1.AddToScheme(s)
	return s
}

// kubeOVNCRDDir is the directory of Kube-OVN's CRDs in the module cache.
func kubeOVNCRDDir() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/kubeovn/kube-ovn").Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/kubeovn/kube-ovn: %w", err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	return filepath.Join(info.Dir, "charts", "kube-ovn-v2", "crds"), nil
}

func run(m *testing.M) (int, error) {
	kovn, err := kubeOVNCRDDir()
	if err != nil {
		return 0, err
	}
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join(chartDir, "crds"), kovn}, Scheme: scheme()})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()}); err != nil {
		return 0, err
	}
	stop, err := startManager()
	if err != nil {
		return 0, err
	}
	defer stop()
	return m.Run(), nil
}

// startManager runs the reconcilers as the binary does, with a cache of their own; it returns a
// function that stops them. A test may run a second one beside the suite's (two replicas racing).
func startManager() (func(), error) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Client.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	if err := (&tenantsubnet.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr, 4); err != nil {
		return nil, err
	}
	if err := (&subnetpool.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("cache did not sync")
	}
	return func() { cancel(); <-done }, nil
}
