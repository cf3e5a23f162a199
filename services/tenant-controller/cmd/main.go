// Command tenant-controller reconciles tenancy.flotilla.dev Tenants and serves their admission
// webhook.
package main

import (
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	"github.com/flotilla-dev/flotilla/libs/runtime/metrics"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/controller/tenant"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/webhook"
)

func main() {
	opts := manager.Options{Name: "tenant-controller"}
	opts.BindFlags(flag.CommandLine)
	groupPrefix := flag.String("oidc-group-prefix", "", "Prefix of the default OIDC group names (<prefix><namespace>-<role>).")
	concurrency := flag.Int("concurrency", 8, "Tenants reconciled in parallel.")
	var counts corev1.ResourceList
	flag.Func("object-counts", "Caps on object counts in every tenant namespace but the root's, for each count a tenant does not declare: count/<resource>[.<group>]=<n>, comma-separated.",
		func(v string) (err error) { counts, err = tenancy.ParseObjectCounts(v); return err })
	var grants []tenancy.NamespaceGrant
	flag.Func("namespace-grants", "ClusterRoles bound in every tenant namespace, and nowhere else, to a platform component's ServiceAccount: <clusterrole>=<namespace>/<serviceaccount>, comma-separated.",
		func(v string) (err error) { grants, err = tenancy.ParseNamespaceGrants(v); return err })
	flag.Parse()

	log := ctrl.Log.WithName("setup")
	if err := run(opts, *groupPrefix, *concurrency, counts, grants); err != nil {
		log.Error(err, "Tenant controller failed")
		os.Exit(1)
	}
}

func run(opts manager.Options, groupPrefix string, concurrency int, counts corev1.ResourceList, grants []tenancy.NamespaceGrant) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := tenancyv1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(opts, scheme, func(o *ctrl.Options) {
		o.Cache = tenant.CacheOptions()
	})
	if err != nil {
		return err
	}
	if err := metrics.RegisterStatus(mgr.GetCache(), metrics.KindOf[tenancyv1.TenantList]("Tenant")); err != nil {
		return err
	}
	r := &tenant.Reconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Recorder:        mgr.GetEventRecorder(opts.Name),
		GroupPrefix:     groupPrefix,
		ObjectCounts:    counts,
		NamespaceGrants: grants,
	}
	ctx := ctrl.SetupSignalHandler()
	if err := r.SetupWithManager(ctx, mgr, concurrency); err != nil {
		return err
	}
	if opts.WebhookPort != 0 {
		if err := (&webhook.TenantValidator{Reader: mgr.GetClient(), Reviewer: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}
