package tenantsubnet_test

import (
	"testing"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/subnetpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantsubnet"
	support "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
)

// The suite runs the real reconcilers against a real kube-apiserver and etcd, with the chart's
// CRDs and Kube-OVN's own CRDs (from the kube-ovn module this service builds against). No Kube-OVN
// controller runs: the tests play its part where one is needed (IP objects holding addresses).
var (
	env *testenv.Env
	k8s client.WithWatch
)

func TestMain(m *testing.M) { support.Main(m, run) }

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	_ = kubeovnv1.AddToScheme(s)
	return s
}

func run(m *testing.M) (int, error) {
	kovn, err := support.KubeOVNCRDs()
	if err != nil {
		return 0, err
	}
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{support.ChartCRDs(), kovn}, Scheme: scheme()})
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

// startManager runs the reconcilers as the binary does; a test may run a second one beside the
// suite's (two replicas racing).
func startManager() (func(), error) {
	return support.StartManager(env.Config, env.Client.Scheme(), func(mgr ctrl.Manager) error {
		if err := (&tenantsubnet.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr, 4); err != nil {
			return err
		}
		return (&subnetpool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr)
	})
}
