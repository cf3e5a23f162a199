// Command net-agent runs on every node (a DaemonSet): it applies the RoutingPolicies that select
// its node with netlink and reports what it applied in the node's NodeRouting.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/agent/noderouting"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/routing"
)

func main() {
	opts := manager.Options{Name: "net-agent"}
	opts.BindFlags(flag.CommandLine)
	nodeName := flag.String("node-name", os.Getenv("NODE_NAME"), "The node the agent runs on (defaults to $NODE_NAME).")
	nsPath := flag.String("netns", "", "Network namespace to manage (a path such as /run/netns/x); empty: the agent's own.")
	flag.Parse()
	opts.WebhookPort = 0
	opts.LeaderElect = false // one agent per node

	if err := run(opts, *nodeName, *nsPath); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Net agent failed")
		os.Exit(1)
	}
}

func run(opts manager.Options, nodeName, nsPath string) error {
	if nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	ns := netns.None()
	if nsPath != "" {
		var err error
		if ns, err = netns.GetFromPath(nsPath); err != nil {
			return fmt.Errorf("--netns: %w", err)
		}
		defer ns.Close()
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	changes, stop, err := routing.Watch(ns)
	if err != nil {
		return err
	}
	defer stop()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := netv1.AddToScheme(scheme); err != nil {
		return err
	}
	own := fields.OneTermEqualSelector("metadata.name", nodeName)
	mgr, err := manager.New(opts, scheme, func(o *ctrl.Options) {
		// The agent sees its own node and NodeRouting, not every node's.
		o.Cache.ByObject = map[client.Object]cache.ByObject{
			&corev1.Node{}:       {Field: own},
			&netv1.NodeRouting{}: {Field: own},
		}
	})
	if err != nil {
		return err
	}
	if err := (&noderouting.Reconciler{
		Client: mgr.GetClient(), NodeName: nodeName, Applier: &routing.Applier{H: h}, Changes: changes,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
