// Package apiserver serves usage.flotilla.dev: UsageReports, answered by the usage engine for
// the tenant whose namespace the report is created in. It is an aggregated API server: it
// delegates authentication and authorization to kube-apiserver, which thus checks that the
// caller may create usagereports in that namespace.
package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/aggregated"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/apiserver/openapi"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

// APIServiceName is the APIService registering this server with kube-apiserver.
const APIServiceName = "v1alpha1.usage.flotilla.dev"

// Options are the usage-api's flags.
type Options struct {
	aggregated.Options
	Usage usage.Config
	// Retention is how long the metrics store keeps samples: no report reaches further back.
	Retention time.Duration
}

// NewOptions returns the defaults: port 8443, delegated authentication and authorization, a
// 60 s resolution and VictoriaMetrics' default retention of a month.
func NewOptions() *Options {
	return &Options{
		Options: aggregated.NewOptions(),
		Usage: usage.Config{
			URL: "http://victoria-metrics:8428", Resolution: time.Minute, MaxGap: 10 * time.Minute, SchedulerJob: "kube-scheduler",
			StateMetricsJob: "kube-state-metrics",
		},
		Retention: 31 * 24 * time.Hour,
	}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.Usage.URL, "metrics-url", o.Usage.URL, "The metrics store's Prometheus query API (VictoriaMetrics).")
	fs.DurationVar(&o.Usage.Resolution, "resolution", o.Usage.Resolution, "The scrape interval of the metrics sources: the grid reports are exact to.")
	fs.DurationVar(&o.Usage.MaxGap, "max-gap", o.Usage.MaxGap, "How long a pod or claim keeps its latest sample while its metrics source cannot be scraped.")
	fs.StringVar(&o.Usage.SchedulerJob, "scheduler-job", o.Usage.SchedulerJob, "The job label of the scrape of kube-scheduler's /metrics/resources.")
	fs.StringVar(&o.Usage.StateMetricsJob, "state-metrics-job", o.Usage.StateMetricsJob, "The job label of the scrape of kube-state-metrics (claims, their volumes and labels).")
	fs.DurationVar(&o.Retention, "retention", o.Retention, "How long the metrics store keeps samples (its -retentionPeriod).")
}

// kubeScheme holds what the server reads from kube-apiserver.
var kubeScheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(kubeScheme))
	utilruntime.Must(helmv2.AddToScheme(kubeScheme))
}

// What reports read in kube-apiserver: tenant namespaces and the apps' HelmReleases.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch

// Server serves UsageReports.
type Server struct {
	generic *genericapiserver.GenericAPIServer
	cache   cache.Cache
}

// New builds the server from its options and a client configuration for kube-apiserver.
func New(o *Options, kube *restclient.Config) (*Server, error) {
	cfg, err := o.Config(Codecs)
	if err != nil {
		return nil, err
	}
	namer := openapinamer.NewDefinitionNamer(scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title, cfg.OpenAPIConfig.Info.Version = "Flotilla usage", usagev1.GroupVersion.Version
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "Flotilla usage", usagev1.GroupVersion.Version
	cfg.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(strictFields(h), c)
	}
	generic, err := cfg.Complete().New("flotilla-usage", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	engine, err := usage.New(o.Usage)
	if err != nil {
		return nil, err
	}
	// Only what reports read: tenant namespaces and the HelmReleases of apps.
	c, err := cache.New(kube, cache.Options{Scheme: kubeScheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Namespace{}:   {Label: mustSelector(tenancyv1.LabelTenant)},
		&helmv2.HelmRelease{}: {Label: mustSelector(meta.LabelAppKind)},
	}})
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(usagev1.GroupVersion.Group, scheme, metav1.ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[usagev1.GroupVersion.Version] = map[string]rest.Storage{
		"usagereports": &reports{
			reporter: engine, reader: c, now: time.Now,
			limits: limits{resolution: o.Usage.Resolution, retention: o.Retention},
		},
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	return &Server{generic: generic, cache: c}, nil
}

// Run starts the cache and serves until ctx ends; the server is ready once the cache synced.
func (s *Server) Run(ctx context.Context) error {
	go func() { _ = s.cache.Start(ctx) }()
	if !s.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("the cache did not sync")
	}
	return s.generic.PrepareRun().RunWithContext(ctx)
}

func mustSelector(key string) labels.Selector {
	req, err := labels.NewRequirement(key, selection.Exists, nil)
	utilruntime.Must(err)
	return labels.NewSelector().Add(*req)
}

// strictFields refuses unknown and duplicate fields in every report, whatever the client asks:
// a misspelt optional field (a step, a workload) would otherwise be dropped and the report answer
// another question. (kubectl asks to ignore them when its own validation is off.)
func strictFields(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			q := r.URL.Query()
			q.Set("fieldValidation", "Strict")
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}
