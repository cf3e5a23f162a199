// Command storage-controller turns storage.flotilla.dev StoragePolicies into LINSTOR resource
// groups and StorageClasses for the LINSTOR CSI driver, and reports their capacity.
package main

import (
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/controller/policy"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
)

func main() {
	opts := manager.Options{Name: "storage-controller"}
	opts.BindFlags(flag.CommandLine)
	var lo linstor.Options
	lo.BindFlags(flag.CommandLine)
	poll := flag.Duration("linstor-poll-interval", 30*time.Second, "How often LINSTOR's nodes and storage pools are read for capacity.")
	flag.Parse()

	if err := run(opts, lo, *poll); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Storage controller failed")
		os.Exit(1)
	}
}

func run(opts manager.Options, lo linstor.Options, poll time.Duration) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := storagepolicyv1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(opts, scheme, nil)
	if err != nil {
		return err
	}
	log := ctrl.Log.WithName("linstor")
	lc, err := linstor.New(lo, log)
	if err != nil {
		return err
	}
	view := linstor.NewView(lc, poll, log)
	if err := mgr.Add(view); err != nil {
		return err
	}
	r := &policy.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), LINSTOR: lc, View: view, Recorder: mgr.GetEventRecorder(opts.Name)}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
