package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync/atomic"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/spf13/pflag"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/admission"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/aggregated"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// APIServiceName is the APIService registering this server with kube-apiserver.
const APIServiceName = "v1alpha1.apps.flotilla.dev"

// AnnotationDiscovery on the APIService holds a hash of the served kinds; changing it makes
// kube-apiserver's aggregator refetch discovery and OpenAPI at once instead of within a minute.
const AnnotationDiscovery = "apps.flotilla.dev/discovery-hash"

// Options are the apps apiserver's flags.
type Options struct {
	aggregated.Options
	// Admission is kube-apiserver's admission chain for apps, as for any resource it serves:
	// NamespaceLifecycle, mutating and validating webhooks and admission policies.
	Admission *genericoptions.AdmissionOptions
	// History bounds the changes the watch cache keeps for watches resuming from a
	// resourceVersion and for lists at an earlier one.
	History HistoryLimits
	// BookmarkInterval is how often watches that allow bookmarks get one.
	BookmarkInterval time.Duration
	// ImageRegistry is the registry prefix the catalog's charts pull their images from (the
	// platform's mirror), given to every app as flotilla.registry.
	ImageRegistry string
}

// NewOptions returns the defaults: port 8443, delegated authentication and authorization.
func NewOptions() *Options {
	return &Options{
		Options:          aggregated.NewOptions(),
		Admission:        genericoptions.NewAdmissionOptions(),
		History:          HistoryLimits{Changes: 10000, Bytes: 64 << 20},
		BookmarkInterval: time.Minute,
	}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Options.AddFlags(fs)
	o.Admission.AddFlags(fs)
	fs.IntVar(&o.History.Changes, "watch-history", o.History.Changes, "Changes of each kind kept for watches that resume from a resourceVersion and lists at an earlier one.")
	fs.Int64Var(&o.History.Bytes, "watch-history-bytes", o.History.Bytes, "Estimated bytes of changes kept over all kinds; over it, the kind with the largest history loses its oldest changes.")
	fs.DurationVar(&o.BookmarkInterval, "watch-bookmark-interval", o.BookmarkInterval, "How often watches that allow bookmarks get one.")
	fs.StringVar(&o.ImageRegistry, "image-registry", o.ImageRegistry, "Registry prefix the catalog's charts pull their images from (the platform's mirror; host[:port]/path), given to each app as flotilla.registry when it is written; empty leaves the charts' own.")
}

// Scheme holds the typed objects the server reads and writes in kube-apiserver.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(helmv2.AddToScheme(Scheme))
	utilruntime.Must(catalogv1.AddToScheme(Scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(Scheme))
}

// Server serves every ApplicationDefinition as a kind of apps.flotilla.dev/v1alpha1.
type Server struct {
	generic *genericapiserver.GenericAPIServer
	cache   cache.Cache
	client  client.WithWatch // kube-apiserver, uncached: writes, and the store's list and watch
	store   *store
	// namespaces: tenant and delivery namespaces, read by every write.
	namespaces       namespaceReader
	bookmarkInterval time.Duration
	imageRegistry    string
	openapi          *handler3.OpenAPIService
	serial           negotiatedSerializer
	admit            admission.Interface

	kinds     atomic.Pointer[map[string]*served] // by plural
	compiler  catalog.Compiler
	rebuildCh chan struct{}
	lastHash  string
}

// New builds the server from its options and a client configuration for kube-apiserver.
func New(o *Options, kube *rest.Config) (*Server, error) {
	cfg, err := o.Config(Codecs)
	if err != nil {
		return nil, err
	}
	cfg.Authorization.Authorizer = listFirst{cfg.Authorization.Authorizer}
	kc, err := kubernetes.NewForConfig(kube)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(kube)
	if err != nil {
		return nil, err
	}
	// The admission plugins' informers (webhook configurations, policies, namespaces); the
	// generic server starts them and is not ready until they have synced.
	cfg.ClientConfig = kube
	cfg.SharedInformerFactory = informers.NewSharedInformerFactory(kc, 0)
	if err := o.Admission.ApplyTo(&cfg.Config, cfg.SharedInformerFactory, kc, dc, feature.DefaultFeatureGate, cfg.EffectiveVersion); err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	generic, err := cfg.Complete().New("flotilla-apps", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	c, err := cache.New(kube, cache.Options{Scheme: Scheme})
	if err != nil {
		return nil, err
	}
	direct, err := client.NewWithWatch(kube, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, err
	}
	s := &Server{
		generic: generic, cache: c, client: direct, store: newStore(o.History), bookmarkInterval: o.BookmarkInterval, imageRegistry: o.ImageRegistry,
		openapi: handler3.NewOpenAPIService(), serial: newNegotiatedSerializer(),
		admit: cfg.AdmissionControl, rebuildCh: make(chan struct{}, 1),
	}
	s.namespaces = namespaceReader{lister: cfg.SharedInformerFactory.Core().V1().Namespaces().Lister(), client: direct}
	s.kinds.Store(&map[string]*served{})
	generic.Handler.NonGoRestfulMux.Handle(groupPath, s)
	generic.Handler.NonGoRestfulMux.HandlePrefix(groupPath+"/", s)
	generic.Handler.NonGoRestfulMux.Handle("/openapi/v3", http.HandlerFunc(s.openapi.HandleDiscovery))
	generic.Handler.NonGoRestfulMux.HandlePrefix("/openapi/v3/", currentOpenAPI(http.HandlerFunc(s.openapi.HandleGroupVersion)))
	generic.DiscoveryGroupManager.AddGroup(apiGroup())
	s.publish(map[string]*served{})
	return s, nil
}

// Run starts the caches and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	// Only HelmReleases that are apps. The store is the reflector's own: no informer, no resync.
	apps := func(opts *metav1.ListOptions) *client.ListOptions {
		opts.LabelSelector = catalogv1.LabelAppKind
		return &client.ListOptions{Raw: opts}
	}
	reflector := toolscache.NewReflectorWithOptions(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &helmv2.HelmReleaseList{}
			return list, s.client.List(ctx, list, apps(&opts))
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return s.client.Watch(ctx, &helmv2.HelmReleaseList{}, apps(&opts))
		},
	}, &helmv2.HelmRelease{}, s.store, toolscache.ReflectorOptions{Name: "apps"})
	go reflector.RunWithContext(ctx)
	go s.store.bookmarks(ctx, s.bookmarkInterval)
	context.AfterFunc(ctx, s.store.stop) // else open watches hold the shutdown up (a minute)
	defInformer, err := s.cache.GetInformer(ctx, &catalogv1.ApplicationDefinition{})
	if err != nil {
		return err
	}
	if _, err := defInformer.AddEventHandler(eventsTo(s.rebuildCh)); err != nil {
		return err
	}
	go func() {
		if err := s.cache.Start(ctx); err != nil {
			klog.ErrorS(err, "cache stopped")
		}
	}()
	if !s.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("caches did not sync")
	}
	select {
	case <-s.store.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.rebuild(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.rebuildCh:
				s.rebuild(ctx)
			}
		}
	}()
	return s.generic.PrepareRun().RunWithContext(ctx)
}

// rebuild resolves the catalog and swaps in the kinds it serves; discovery and OpenAPI follow.
func (s *Server) rebuild(ctx context.Context) {
	var defs catalogv1.ApplicationDefinitionList
	if err := s.cache.List(ctx, &defs); err != nil {
		klog.ErrorS(err, "listing ApplicationDefinitions")
		return
	}
	var candidates []*catalogv1.ApplicationDefinition
	for i := range defs.Items {
		if !catalogv1.Withheld(&defs.Items[i]) {
			candidates = append(candidates, &defs.Items[i])
		}
	}
	resolved := catalog.Resolve(candidates, s.compiler.Compile)
	s.compiler.Retain(defs.Items)
	old := *s.kinds.Load()
	next := make(map[string]*served, len(resolved.Kinds))
	for plural, k := range resolved.Kinds {
		if prev, ok := old[plural]; ok && prev.kind == k {
			next[plural] = prev
			continue
		}
		sv, err := s.newServed(k)
		if err != nil {
			klog.ErrorS(err, "serving kind", "definition", k.Definition.Name)
			continue
		}
		next[plural] = sv
	}
	if !maps.Equal(old, next) { // else a status write or an unserved definition
		s.kinds.Store(&next)
		s.publish(next)
	}
	s.touchAPIService(ctx, next)
}

// publish updates discovery and OpenAPI to the served kinds.
func (s *Server) publish(kinds map[string]*served) {
	s.generic.AggregatedDiscoveryGroupManager.AddGroupVersion(catalogv1.AppsGroupVersion.Group, apidiscoveryv2.APIVersionDiscovery{
		Version: catalogv1.AppsGroupVersion.Version, Resources: resourceDiscovery(kinds), Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
	})
	doc := &spec3.OpenAPI{Version: "3.0.0", Paths: &spec3.Paths{}, Components: &spec3.Components{}}
	for _, sv := range sortedKinds(kinds) {
		mergeOpenAPI(doc, sv.kind.OpenAPI)
	}
	s.openapi.UpdateGroupVersion("apis/"+catalogv1.AppsGroupVersion.String(), doc)
}

// touchRetry is how long a failed APIService annotation waits before the next attempt.
const touchRetry = 2 * time.Second

// touchAPIService records a hash of the discovery document on the APIService when it changes, so
// that kube-apiserver's aggregator refreshes discovery and OpenAPI straight away.
func (s *Server) touchAPIService(ctx context.Context, kinds map[string]*served) {
	raw, _ := json.Marshal(resourceDiscovery(kinds))
	for _, sv := range sortedKinds(kinds) {
		raw = fmt.Appendf(raw, "%s/%d", sv.kind.Definition.UID, sv.kind.Definition.Generation)
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:8])
	svc := &apiregistrationv1.APIService{}
	if s.lastHash == "" && s.client.Get(ctx, client.ObjectKey{Name: APIServiceName}, svc) == nil {
		// A restarted server (a new pod) serving what the one before it served writes nothing.
		s.lastHash = svc.Annotations[AnnotationDiscovery]
	}
	if hash == s.lastHash {
		return
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationDiscovery, hash)
	svc = &apiregistrationv1.APIService{}
	svc.Name = APIServiceName
	if err := s.client.Patch(ctx, svc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		klog.InfoS("could not annotate the APIService, retrying (meanwhile the aggregator refreshes discovery within a minute)", "err", err)
		time.AfterFunc(touchRetry, func() { signal(s.rebuildCh) })
		return
	}
	s.lastHash = hash
}

// The apps apiserver's permissions (the chart's apiserver ClusterRole is generated from these):
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=applicationdefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations;validatingadmissionpolicies;validatingadmissionpolicybindings;mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;patch;deletecollection
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;patch,resourceNames=v1alpha1.apps.flotilla.dev
