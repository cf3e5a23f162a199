package tenantaddresspool_test

import (
	"context"
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
	ts "github.com/flotilla-dev/flotilla/services/net-controller/internal/testsupport"
)

// The suite runs the real reconcilers against a real kube-apiserver and etcd, with the chart's CRDs
// and MetalLB's published CRDs (test/crds/metallb), and kube-controller-manager's resourcequota
// controller, without which kube-apiserver cannot enforce a tenant's quota. No MetalLB controller
// runs: the tests play its part where one is needed (a Service's load-balancer address).
var (
	env *testenv.Env
	k8s client.WithWatch
)

// metallbNS is MetalLB's namespace in the suite.
const metallbNS = "metallb-system"

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
	stop, err := startManager()
	if err != nil {
		return 0, err
	}
	defer stop()
	return m.Run(), nil
}

// startManager runs the reconcilers as the binary does with --metallb-namespace.
func startManager() (func(), error) {
	return ts.StartManager(env.Config, env.Client.Scheme(), func(mgr ctrl.Manager) error {
		if err := (&tenantaddresspool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: metallbNS}).
			SetupWithManager(mgr, 4); err != nil {
			return err
		}
		return (&loadbalancerpool.Reconciler{Client: mgr.GetClient(), Namespace: metallbNS}).SetupWithManager(mgr)
	})
}
