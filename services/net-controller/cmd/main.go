// Command net-controller gives tenant namespaces their Kube-OVN subnets from SubnetPools and their
// load-balancer addresses from LoadBalancerPools (MetalLB), and programs TenantNetworks into OVN.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	"github.com/flotilla-dev/flotilla/libs/runtime/metrics"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/addresses"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/loadbalancerpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/routingpolicy"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/subnetpool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantaddresspool"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantnetwork"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantsubnet"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn"
)

func main() {
	opts := manager.Options{Name: "net-controller"}
	opts.BindFlags(flag.CommandLine)
	concurrency := flag.Int("concurrency", 4, "Tenant namespaces reconciled in parallel.")
	var nw networkFlags
	flag.StringVar(&nw.nb, "ovn-nb", "", "OVN northbound database (tcp:HOST:PORT or unix:PATH); empty leaves TenantNetworks alone.")
	flag.StringVar(&nw.external, "external-cidr", "100.64.0.0/16", "The platform's external (transit) range TenantNetworks' SNAT and floating addresses come from.")
	flag.IntVar(&nw.perNamespace, "external-ips-per-namespace", 8, "External addresses the TenantNetworks of one namespace may hold together.")
	flag.IntVar(&nw.concurrency, "network-concurrency", 64, "TenantNetworks reconciled in parallel. A reconcile mostly waits on OVN, and the OVN changes of those in flight share one transaction: more of them, fewer and larger transactions for ovn-northd to recompute after.")
	metallbNS := flag.String("metallb-namespace", "", "MetalLB's namespace, where tenants' IPAddressPools and the pools' L2Advertisements are written; empty leaves LoadBalancerPools alone (MetalLB is not installed).")
	flag.Parse()

	if err := run(opts, *concurrency, nw, *metallbNS); err != nil {
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

// networkFlags configure the TenantNetwork controller.
type networkFlags struct {
	nb, external              string
	perNamespace, concurrency int
}

func run(opts manager.Options, concurrency int, nw networkFlags, metallbNS string) error {
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	mgr, err := manager.New(opts, scheme, tenantsubnet.CacheOptions)
	if err != nil {
		return err
	}
	if err := metrics.RegisterStatus(mgr.GetCache(), metrics.KindOf[netv1.SubnetPoolList]("SubnetPool"), metrics.KindOf[netv1.TenantSubnetList]("TenantSubnet"), metrics.KindOf[netv1.TenantNetworkList]("TenantNetwork"), metrics.KindOf[netv1.RoutingPolicyList]("RoutingPolicy"),
		metrics.KindOf[netv1.LoadBalancerPoolList]("LoadBalancerPool"), metrics.KindOf[netv1.TenantAddressPoolList]("TenantAddressPool")); err != nil {
		return err
	}
	if err := (&tenantsubnet.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(opts.Name),
	}).SetupWithManager(mgr, concurrency); err != nil {
		return err
	}
	if err := (&subnetpool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&routingpolicy.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if metallbNS != "" {
		if err := (&tenantaddresspool.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(opts.Name),
			Namespace: metallbNS,
		}).SetupWithManager(mgr, concurrency); err != nil {
			return err
		}
		if err := (&loadbalancerpool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: metallbNS}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	ctx := ctrl.SetupSignalHandler()
	if nw.nb != "" {
		external, err := netip.ParsePrefix(nw.external)
		if err != nil {
			return fmt.Errorf("--external-cidr: %w", err)
		}
		nb, err := ovn.Connect(ctx, nw.nb, ctrl.Log.WithName("ovn"))
		if err != nil {
			return err
		}
		defer nb.Close()
		if err := (&tenantnetwork.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(opts.Name),
			NB: nb, External: addresses.Range{Prefix: external.Masked()}, PerNamespace: nw.perNamespace,
			Concurrency: nw.concurrency,
		}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}
