// Command local-provider is the STAND-IN for Kamaji and KubeVirt on a machine that runs no pods
// and no virtual machines (the tests, `make demo`): a real kube-apiserver per KamajiControlPlane
// on the platform's etcd, and a Node in the customer's cluster per KubevirtMachine. It is never
// shipped in a chart. What it plays, and what it does not: internal/localprovider.
package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/localprovider"
)

func main() {
	opts := manager.Options{Name: "local-provider"}
	opts.BindFlags(flag.CommandLine)
	home, _ := os.UserHomeDir()
	var po localprovider.Options
	flag.StringVar(&po.KubeAPIServer, "kube-apiserver", filepath.Join(home, ".cache", "flotilla", "bin", "kube-apiserver"), "Path of the kube-apiserver binary run for each control plane.")
	flag.StringVar(&po.EtcdServers, "etcd-servers", "", "The platform's etcd (comma-separated URLs): each control plane's state goes there under /<dataStoreSchema>.")
	flag.StringVar(&po.StateDir, "state-dir", filepath.Join(os.TempDir(), "flotilla-local-provider"), "Where each control plane's certificates, port and log are kept.")
	flag.StringVar(&po.InfraNamespace, "infra-namespace", "", "The cluster-controller's --infra-namespace: its Deployments are reported available (no container runs).")
	flag.BoolVar(&po.InfraPods, "infra-pods", false, "kube-controller-manager's Deployment controller runs: play only the kubelet of the infrastructure namespace's pods on Nodes no kubelet runs, instead of reporting their Deployments available.")
	namespace := flag.String("namespace", "", "Serve only this namespace (default: all).")
	flag.Parse()
	if err := run(opts, po, *namespace); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Local provider stand-in failed")
		os.Exit(1)
	}
}

func run(opts manager.Options, po localprovider.Options, namespace string) error {
	if po.EtcdServers == "" {
		return errors.New("--etcd-servers is required")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	opts.WebhookPort = 0
	mgr, err := manager.New(opts, scheme, func(o *ctrl.Options) {
		if namespace != "" {
			o.Cache.DefaultNamespaces = map[string]cache.Config{namespace: {}}
			if po.InfraNamespace != "" {
				o.Cache.DefaultNamespaces[po.InfraNamespace] = cache.Config{}
			}
		}
	})
	if err != nil {
		return err
	}
	p := &localprovider.Provider{Client: mgr.GetClient(), Options: po}
	if err := p.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
