package noderouting_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/nstest"
)

// The suite runs the agent's reconciler against a real kube-apiserver and etcd, on real network
// namespaces (each test its own host). The control plane is started outside any user namespace
// the tests may run in: only the host namespaces need one.
var (
	env      *testenv.Env
	k8s      client.WithWatch
	chartDir = filepath.Join("..", "..", "..", "..", "..", "deploy", "charts", "net-controller")
)

func TestMain(m *testing.M) { os.Exit(nstest.Main(runSuite{m})) }

// runSuite starts the control plane around the tests.
type runSuite struct{ m *testing.M }

func (r runSuite) Run() int {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = netv1.AddToScheme(s)
	var err error
	env, err = testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join(chartDir, "crds")}, Scheme: s})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: s}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return r.m.Run()
}
