// Command app-catalog-controller reconciles the catalog (catalog.flotilla.dev): it reports which
// ApplicationDefinitions are served and why not, guards their deletion while apps exist, and
// imports definitions from CatalogSources, keeps the delivery namespaces' source copies and orders
// the shared services tenants host themselves. The apps themselves are served by cmd/apiserver.
package main

import (
	"flag"
	"maps"
	"net/http"
	"os"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	"github.com/flotilla-dev/flotilla/libs/runtime/metrics"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/appidentity"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/appworkloads"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/catalogsource"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/definition"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/deliverysource"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/controller/tenantservice"
)

func main() {
	opts := manager.Options{Name: "app-catalog-controller"}
	opts.BindFlags(flag.CommandLine)
	maxArtifact := flag.Int64("max-artifact-size", 50<<20, "Largest CatalogSource artifact read, in bytes (compressed and uncompressed).")
	var secretNamespaces []string
	flag.Func("catalog-secret-namespaces", "Comma-separated namespaces whose Secrets the catalog's Flux sources may name (credentials of private catalogs): "+
		"the only Secrets the controller reads, copied into the delivery namespaces of the tenants whose apps use the source.", func(v string) error {
		secretNamespaces = strings.Split(v, ",")
		return nil
	})
	flag.Parse()
	if err := run(opts, *maxArtifact, secretNamespaces); err != nil {
		ctrl.Log.WithName("setup").Error(err, "app-catalog-controller failed")
		os.Exit(1)
	}
}

func run(opts manager.Options, maxArtifact int64, secretNamespaces []string) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, catalogv1.AddToScheme, helmv2.AddToScheme, sourcev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	mgr, err := manager.New(opts, scheme, func(o *ctrl.Options) {
		o.Cache.ByObject = definition.CacheByObject()
		maps.Copy(o.Cache.ByObject, appworkloads.CacheByObject())
		maps.Copy(o.Cache.ByObject, appidentity.CacheByObject())
	})
	if err != nil {
		return err
	}
	if err := metrics.RegisterStatus(mgr.GetCache(), metrics.KindOf[catalogv1.ApplicationDefinitionList]("ApplicationDefinition"), metrics.KindOf[catalogv1.CatalogSourceList]("CatalogSource")); err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	if err := (&definition.Reconciler{Client: mgr.GetClient(), Discovery: dc}).SetupWithManager(mgr); err != nil {
		return err
	}
	secrets, err := deliverysource.SecretsCache(mgr, secretNamespaces)
	if err != nil {
		return err
	}
	if err := (&deliverysource.Reconciler{Client: mgr.GetClient(), Secrets: secrets}).SetupWithManager(mgr, secrets); err != nil {
		return err
	}
	if err := (&tenantservice.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&appworkloads.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&appidentity.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	fetcher := &catalogsource.Fetcher{HTTP: &http.Client{Timeout: time.Minute}, MaxSize: maxArtifact}
	if err := (&catalogsource.Reconciler{Client: mgr.GetClient(), Fetcher: fetcher}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
