package noderouting_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/routingpolicy"
	support "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/nstest"
)

// The suite runs the agent's reconciler against a real kube-apiserver and etcd, on real network
// namespaces (each test its own host). The control plane is started outside any user namespace
// the tests may run in: only the host namespaces need one.
var (
	env *testenv.Env
	k8s client.WithWatch
)

func TestMain(m *testing.M) { os.Exit(nstest.Main(runSuite{m})) }

// runSuite starts the control plane around the tests.
type runSuite struct{ m *testing.M }

func (r runSuite) Run() int {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	var err error
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{support.ChartCRDs()}, Scheme: s})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: s}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The net-controller's side: RoutingPolicies' status from the nodes' reports.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := (&routingpolicy.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	return r.m.Run()
}
