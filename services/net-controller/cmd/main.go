// Command net-controller gives tenant namespaces their Kube-OVN subnets from SubnetPools and
// programs TenantNetworks into OVN.
package main

import (
	"flag"
	"os"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/subnetpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantsubnet"
)

func main() {
	opts := manager.Options{Name: "net-controller"}
	opts.BindFlags(flag.CommandLine)
	concurrency := flag.Int("concurrency", 4, "Tenant namespaces reconciled in parallel.")
	flag.Parse()
	opts.WebhookPort = 0 // validation is in the CRDs' schemas; there is no webhook

	if err := run(opts, *concurrency); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Net controller failed")
		os.Exit(1)
	}
}

// Scheme is what the controller reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, netv1.AddToScheme, kubeovnv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func run(opts manager.Options, concurrency int) error {
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	mgr, err := manager.New(opts, scheme, nil)
	if err != nil {
		return err
	}
	if err := (&tenantsubnet.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(opts.Name),
	}).SetupWithManager(mgr, concurrency); err != nil {
		return err
	}
	if err := (&subnetpool.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
