package apiserver

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// readYourWrites bounds how long a read waits for the cache to show the writes this server has
// answered and the HelmReleases it has read (store.caughtUp).
const readYourWrites = 10 * time.Second

// appStorage is the rest.Storage of one kind of app: reads from the store, writes HelmReleases.
type appStorage struct {
	kind  *catalog.Kind
	store *store
	// client reads and writes kube-apiserver directly (no cache): writes, and the reads they
	// depend on, must see the latest state.
	client     client.Client
	namespaces namespaceReader
	// registry is given to every app written as flotilla.registry (Options.ImageRegistry).
	registry string
}

var (
	_ rest.Getter            = &appStorage{}
	_ rest.Lister            = &appStorage{}
	_ rest.Watcher           = &appStorage{}
	_ rest.Creater           = &appStorage{}
	_ rest.Updater           = &appStorage{}
	_ rest.GracefulDeleter   = &appStorage{}
	_ rest.CollectionDeleter = &appStorage{}
	_ rest.Scoper            = &appStorage{}
	_ rest.TableConvertor    = &appStorage{}
)

func (s *appStorage) gr() schema.GroupResource { return s.kind.GVR.GroupResource() }

// New implements rest.Storage.
func (s *appStorage) New() runtime.Object {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(s.kind.GVK)
	return u
}

// NewList implements rest.Lister.
func (s *appStorage) NewList() runtime.Object {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(s.kind.GVK.GroupVersion().WithKind(s.kind.GVK.Kind + "List"))
	return l
}

// Destroy implements rest.Storage.
func (s *appStorage) Destroy() {}

// NamespaceScoped implements rest.Scoper.
func (s *appStorage) NamespaceScoped() bool { return true }

// GetSingularName implements rest.SingularNameProvider.
func (s *appStorage) GetSingularName() string { return s.kind.Singular }
