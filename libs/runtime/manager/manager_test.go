package manager

import (
	"context"
	"flag"
	"net"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// A service that registers no webhook, started with the common flags' defaults (as its chart runs
// it), becomes Ready: the cluster-controller's pods never did, waiting on a webhook server that
// nothing started (found when the release first ran on a real node).
func TestReadyWithoutWebhooks(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kubeconfig, err := env.AdminKubeconfig("manager-test", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	probes := l.Addr().String()
	_ = l.Close()

	o := Options{Name: "manager-test"}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--metrics-bind-address=0", "--health-probe-bind-address=" + probes}); err != nil {
		t.Fatal(err)
	}
	mgr, err := New(o, clientgoscheme.Scheme, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()
	var status string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		status = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/readyz never answered 200 (last: %q): %v", status, err)
	}
}
