package tenantnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/addresses"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantnetwork"
	support "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn"
)

// The suite runs the real reconciler against a real kube-apiserver and etcd, and a real OVN
// (NB and SB ovsdb-server, ovn-northd).
var (
	env      *testenv.Env
	k8s      client.WithWatch
	ovnProcs *testenv.OVN
	nb       *ovn.Programmer
	// external is the suite's external range; perNamespace its per-namespace limit.
	external     = addresses.Range{Prefix: netip.MustParsePrefix("100.64.0.0/24")}
	perNamespace = 3
)

func TestMain(m *testing.M) { support.Main(m, run) }

func run(m *testing.M) (int, error) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	var err error
	if ovnProcs, err = testenv.StartOVN(""); err != nil {
		return 0, err
	}
	defer func() { _ = ovnProcs.Stop() }()
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{support.ChartCRDs()}, Scheme: s})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: s}); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if nb, err = ovn.Connect(ctx, ovnProcs.NB(), ctrl.Log.WithName("ovn")); err != nil {
		return 0, err
	}
	defer nb.Close()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     s,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return 0, err
	}
	if err := (&tenantnetwork.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), NB: nb, External: external, PerNamespace: perNamespace,
		Concurrency: 64, // the binary's default
	}).SetupWithManager(mgr); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return 0, fmt.Errorf("cache did not sync")
	}
	code := m.Run()
	cancel()
	<-done
	return code, nil
}
