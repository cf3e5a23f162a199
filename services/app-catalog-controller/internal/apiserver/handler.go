package apiserver

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/ptr"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

var (
	groupPath   = "/apis/" + catalogv1.AppsGroupVersion.Group
	versionPath = "/apis/" + catalogv1.AppsGroupVersion.String()
	verbs       = metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	// patchTypes: strategic merge patch needs Go types, which apps do not have.
	patchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType), string(types.ApplyCBORPatchType)}
)

const (
	maxRequestBodyBytes = 3 * 1024 * 1024
	minRequestTimeout   = 30 * time.Minute
)

// served is one kind being served: its storage and the generic handlers' request scope.
type served struct {
	kind    *catalog.Kind
	storage *appStorage
	scope   *handlers.RequestScope
}

// parameterCodec decodes query parameters (list, get, delete, create, update, patch options).
var parameterCodec = func() runtime.ParameterCodec {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, catalogv1.AppsGroupVersion)
	return runtime.NewParameterCodec(s)
}()

// defaulter applies a kind's schema defaults, for the server-side apply machinery.
type defaulter struct{ kind *catalog.Kind }

func (d defaulter) Default(obj runtime.Object) {
	if u, ok := obj.(runtime.Unstructured); ok {
		d.kind.Default(u.UnstructuredContent())
	}
}

func (s *Server) newServed(k *catalog.Kind) (*served, error) {
	storage := &appStorage{kind: k, store: s.store, client: s.client, namespaces: s.namespaces, registry: s.imageRegistry}
	scope := &handlers.RequestScope{
		Namer:               handlers.ContextBasedNaming{Namer: meta.NewAccessor(), ClusterScoped: false},
		Serializer:          s.serial,
		ParameterCodec:      parameterCodec,
		StandardSerializers: s.serial.infos,
		Creater:             unstructuredCreator{},
		Convertor:           converter{},
		Defaulter:           defaulter{k},
		Typer:               scheme,
		UnsafeConvertor:     converter{},
		Authorizer:          s.generic.Authorizer,

		EquivalentResourceMapper: runtime.NewEquivalentResourceRegistry(),
		TableConvertor:           storage,
		Resource:                 k.GVR,
		Kind:                     k.GVK,
		HubGroupVersion:          k.GVK.GroupVersion(),
		MetaGroupVersion:         metav1.SchemeGroupVersion,
		MaxRequestBodyBytes:      maxRequestBodyBytes,
	}
	fm, err := managedfields.NewDefaultCRDFieldManager(k.TypeConverter, converter{}, defaulter{k}, unstructuredCreator{},
		k.GVK, k.GVK.GroupVersion(), "", nil)
	if err != nil {
		return nil, err
	}
	scope.FieldManager = fm
	return &served{kind: k, storage: storage, scope: scope}, nil
}

// ServeHTTP serves /apis/apps.flotilla.dev and everything below it. The kind is looked up per
// request, so definitions come and go without a restart.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	info, ok := request.RequestInfoFrom(r.Context())
	if !ok {
		responsewriters.InternalError(w, r, nil)
		return
	}
	kinds := *s.kinds.Load()
	if !info.IsResourceRequest {
		switch strings.TrimSuffix(r.URL.Path, "/") {
		case groupPath:
			responsewriters.WriteObjectNegotiated(Codecs, negotiation.DefaultEndpointRestrictions, schema.GroupVersion{}, w, r, http.StatusOK, ptr.To(apiGroup()), false)
		case versionPath:
			responsewriters.WriteObjectNegotiated(Codecs, negotiation.DefaultEndpointRestrictions, schema.GroupVersion{}, w, r, http.StatusOK, resourceList(kinds), false)
		default:
			http.NotFound(w, r)
		}
		return
	}
	sv := kinds[info.Resource]
	if info.APIVersion != catalogv1.AppsGroupVersion.Version || sv == nil || info.Subresource != "" {
		err := apierrors.NewNotFound(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Name)
		responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, r)
		return
	}
	// A handler per request, as kube-apiserver's installer does: the generic handlers keep
	// per-request state in their closures (PatchResource wraps its admit), so one cannot be shared.
	switch info.Verb {
	case "get":
		handlers.GetResource(sv.storage, sv.scope)(w, r)
	case "list":
		handlers.ListResource(sv.storage, sv.storage, sv.scope, false, minRequestTimeout)(w, r)
	case "watch":
		handlers.ListResource(sv.storage, sv.storage, sv.scope, true, minRequestTimeout)(w, r)
	case "create":
		handlers.CreateResource(sv.storage, sv.scope, s.admit)(w, r)
	case "update":
		handlers.UpdateResource(sv.storage, sv.scope, s.admit)(w, r)
	case "patch":
		handlers.PatchResource(sv.storage, sv.scope, s.admit, patchTypes)(w, r)
	case "delete":
		handlers.DeleteResource(sv.storage, true, sv.scope, s.admit)(w, r)
	case "deletecollection":
		handlers.DeleteCollection(sv.storage, true, sv.scope, s.admit)(w, r)
	default:
		err := apierrors.NewMethodNotSupported(sv.kind.GVR.GroupResource(), info.Verb)
		responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, r)
	}
}

func apiGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: catalogv1.AppsGroupVersion.String(), Version: catalogv1.AppsGroupVersion.Version}
	return metav1.APIGroup{Name: catalogv1.AppsGroupVersion.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

func sortedKinds(kinds map[string]*served) []*served {
	out := make([]*served, 0, len(kinds))
	for _, sv := range kinds {
		out = append(out, sv)
	}
	slices.SortFunc(out, func(a, b *served) int { return strings.Compare(a.kind.GVR.Resource, b.kind.GVR.Resource) })
	return out
}

func categories(k *catalog.Kind) []string {
	return append([]string{"flotilla", "apps"}, k.Definition.Spec.Names.Categories...)
}

// resourceList is the legacy discovery document of apps.flotilla.dev/v1alpha1.
func resourceList(kinds map[string]*served) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: catalogv1.AppsGroupVersion.String(), APIResources: []metav1.APIResource{}}
	for _, sv := range sortedKinds(kinds) {
		k := sv.kind
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: k.GVR.Resource, SingularName: k.Singular, Namespaced: true, Kind: k.GVK.Kind,
			Verbs: verbs, ShortNames: k.Definition.Spec.Names.ShortNames, Categories: categories(k),
		})
	}
	return l
}

// resourceDiscovery is the aggregated discovery of apps.flotilla.dev/v1alpha1.
func resourceDiscovery(kinds map[string]*served) []apidiscoveryv2.APIResourceDiscovery {
	out := []apidiscoveryv2.APIResourceDiscovery{}
	for _, sv := range sortedKinds(kinds) {
		k := sv.kind
		out = append(out, apidiscoveryv2.APIResourceDiscovery{
			Resource: k.GVR.Resource, SingularResource: k.Singular, Scope: apidiscoveryv2.ScopeNamespace,
			ResponseKind: &metav1.GroupVersionKind{Group: k.GVK.Group, Version: k.GVK.Version, Kind: k.GVK.Kind},
			Verbs:        verbs, ShortNames: k.Definition.Spec.Names.ShortNames, Categories: categories(k),
		})
	}
	return out
}

// mergeOpenAPI adds one kind's OpenAPI document to the group version's.
func mergeOpenAPI(into, from *spec3.OpenAPI) {
	if from == nil {
		return
	}
	if into.Info == nil {
		into.Info = from.Info
	}
	if from.Paths != nil {
		if into.Paths.Paths == nil {
			into.Paths.Paths = map[string]*spec3.Path{}
		}
		for p, v := range from.Paths.Paths {
			into.Paths.Paths[p] = v
		}
	}
	if from.Components != nil {
		if into.Components.Schemas == nil {
			into.Components.Schemas = map[string]*spec.Schema{}
		}
		for n, v := range from.Components.Schemas {
			into.Components.Schemas[n] = v
		}
	}
}

// listFirst answers a request for one named app with the check for the whole resource first:
// RBAC allows a verb on every name when it allows it without one, and that check is cached per
// user, namespace and resource instead of per app. Only a denial costs the per-name check that
// resourceNames rules need.
type listFirst struct{ authorizer.Authorizer }

func (l listFirst) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.IsResourceRequest() && a.GetName() != "" && a.GetAPIGroup() == catalogv1.AppsGroupVersion.Group {
		nameless := authorizer.AttributesRecord{
			User: a.GetUser(), Verb: a.GetVerb(), Namespace: a.GetNamespace(), APIGroup: a.GetAPIGroup(),
			APIVersion: a.GetAPIVersion(), Resource: a.GetResource(), Subresource: a.GetSubresource(),
			ResourceRequest: true, Path: a.GetPath(),
		}
		if d, _, err := l.Authorizer.Authorize(ctx, nameless); err == nil && d == authorizer.DecisionAllow {
			return d, "", nil
		}
	}
	return l.Authorizer.Authorize(ctx, a)
}

func (l listFirst) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(l.Authorize(ctx, a))
}

// signal wakes ch's reader without blocking; a wake-up already pending covers this one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// eventsTo signals ch on every informer event.
func eventsTo(ch chan struct{}) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal(ch) },
		UpdateFunc: func(any, any) { signal(ch) },
		DeleteFunc: func(any) { signal(ch) },
	}
}
