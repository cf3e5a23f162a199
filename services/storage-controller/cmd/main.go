// Command storage-controller turns storage.flotilla.dev StoragePolicies into LINSTOR resource
// groups and StorageClasses for the LINSTOR CSI driver, reports their capacity, serves the webhook
// that refuses claims of those classes that cannot fit, and the kube-scheduler extender that puts
// pods next to their data; and writes SchedulingClasses into pods at admission.
package main

import (
	"flag"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	"github.com/flotilla-dev/flotilla/libs/runtime/metrics"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/controller/policy"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/controller/schedulingclass"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/extender"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/webhook"
)

func main() {
	opts := manager.Options{Name: "storage-controller"}
	opts.BindFlags(flag.CommandLine)
	var lo linstor.Options
	lo.BindFlags(flag.CommandLine)
	poll := flag.Duration("linstor-poll-interval", 30*time.Second, "How often LINSTOR's nodes, storage pools and resources are read.")
	extenderAddr := flag.String("extender-bind-address", ":8099", "Address the kube-scheduler extender (POST /filter, /prioritize) binds to; 0 disables it.")
	zoneKey := flag.String("zone-label", "topology.kubernetes.io/zone", "Node label naming a node's zone, for the extender's same-zone score.")
	webhookConfig := flag.String("webhook-configuration", "storage-controller", "ValidatingWebhookConfiguration of the claim webhook, whose match condition the controller keeps naming the policies' StorageClasses.")
	flag.Parse()

	if err := run(opts, lo, *poll, *webhookConfig, *extenderAddr, *zoneKey); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Storage controller failed")
		os.Exit(1)
	}
}

func run(opts manager.Options, lo linstor.Options, poll time.Duration, webhookConfig, extenderAddr, zoneKey string) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := storagepolicyv1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(opts, scheme, func(o *ctrl.Options) {
		o.Cache.ByObject = policy.CacheByObject(webhookConfig)
		o.Cache.ByObject[&corev1.Pod{}] = schedulingclass.PodCache()
	})
	if err != nil {
		return err
	}
	if err := metrics.RegisterStatus(mgr.GetCache(), metrics.KindOf[storagepolicyv1.StoragePolicyList]("StoragePolicy"), metrics.KindOf[storagepolicyv1.SchedulingClassList]("SchedulingClass")); err != nil {
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
	if opts.WebhookPort != 0 {
		r.WebhookConfiguration = webhookConfig
		if err := (&webhook.ClaimValidator{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), View: view}).SetupWithManager(mgr); err != nil {
			return err
		}
		if err := (&webhook.PodPlacer{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&schedulingclass.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&schedulingclass.HeldPods{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(opts.Name)}).SetupWithManager(mgr); err != nil {
		return err
	}
	if extenderAddr != "0" {
		x := &extender.Extender{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), View: view, ZoneKey: zoneKey}
		// Every replica serves: kube-scheduler reaches whichever the Service picks.
		if err := mgr.Add(&ctrlmanager.Server{Name: "extender", Server: &http.Server{Addr: extenderAddr, Handler: x.Handler(), ReadHeaderTimeout: 5 * time.Second}}); err != nil {
			return err
		}
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
