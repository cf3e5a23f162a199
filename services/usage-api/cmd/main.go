// Command usage-api serves usage.flotilla.dev/v1alpha1: UsageReports, what a tenant and its
// workloads used, answered from VictoriaMetrics. It is registered with kube-apiserver by an
// APIService and delegates authentication and authorization to it.
package main

import (
	"flag"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/services/usage-api/internal/apiserver"
)

func main() {
	opts := apiserver.NewOptions()
	opts.AddFlags(pflag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine) // --kubeconfig, -v
	pflag.Parse()

	ctrl.SetLogger(klog.NewKlogr()) // the cache's logs, with the server's
	ctx := ctrl.SetupSignalHandler()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		klog.ErrorS(err, "no kubeconfig")
		os.Exit(1)
	}
	srv, err := apiserver.New(opts, cfg)
	if err != nil {
		klog.ErrorS(err, "building the apiserver")
		os.Exit(1)
	}
	if err := srv.Run(ctx); err != nil {
		klog.ErrorS(err, "apiserver stopped")
		os.Exit(1)
	}
}
