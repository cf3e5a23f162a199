package localprovider

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// FieldOwner is the stand-in's field manager.
const FieldOwner = "local-provider"

// Kinds the stand-in reads beyond the ones the cluster-controller owns.
var (
	MachineGVK         = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
	KubevirtMachineGVK = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "KubevirtMachine"}
	KubeadmConfigGVK   = schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfig"}
)

// Options place the stand-in's control planes.
type Options struct {
	// KubeAPIServer is the path of the kube-apiserver binary.
	KubeAPIServer string
	// EtcdServers is the platform's etcd (comma-separated URLs); every control plane keeps its
	// state there under /<dataStoreSchema>.
	EtcdServers string
	// StateDir keeps each control plane's certificates, port and log, under <namespace>/<name>.
	StateDir string
	// InfraNamespace is the cluster-controller's infrastructure namespace (--infra-namespace),
	// whose Deployments the stand-in reports available; empty leaves Deployments alone.
	InfraNamespace string
	// InfraPods: kube-controller-manager's Deployment controller runs, and the stand-in plays only
	// the kubelet of the infrastructure namespace's pods bound to a node no kubelet runs (a Node
	// made by hand): they report their containers running and ready.
	InfraPods bool
}

// Provider is the stand-in: set it up with a manager, whose stop stops every kube-apiserver.
type Provider struct {
	Client  client.Client
	Options Options

	mu      sync.Mutex
	servers map[types.NamespacedName]*apiServer
	clients map[types.NamespacedName]customerClient
	// exits re-queues a KamajiControlPlane whose kube-apiserver exited, to start it again.
	exits chan event.GenericEvent
}

type customerClient struct {
	sum    [32]byte
	client client.Client
}

// SetupWithManager registers the two halves of the stand-in and the stop of its processes.
func (p *Provider) SetupWithManager(mgr ctrl.Manager) error {
	p.servers = map[types.NamespacedName]*apiServer{}
	p.clients = map[types.NamespacedName]customerClient{}
	p.exits = make(chan event.GenericEvent, 16)
	if err := ctrl.NewControllerManagedBy(mgr).Named("localprovider-controlplane").
		For(object(cluster.KamajiControlPlaneGVK)).
		WatchesRawSource(source.Channel(p.exits, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(p.reconcileControlPlane)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("localprovider-machine").
		For(object(KubevirtMachineGVK)).
		// A Machine's bootstrap data arriving lets its VM boot.
		Watches(object(MachineGVK), handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			u := o.(*unstructured.Unstructured)
			if kind, _, _ := unstructured.NestedString(u.Object, "spec", "infrastructureRef", "kind"); kind != KubevirtMachineGVK.Kind {
				return nil
			}
			name, _, _ := unstructured.NestedString(u.Object, "spec", "infrastructureRef", "name")
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: u.GetNamespace(), Name: name}}}
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(p.reconcileMachine)); err != nil {
		return err
	}
	isAddon := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[clusterapi.LabelAddon] != "" })
	if err := ctrl.NewControllerManagedBy(mgr).Named("localprovider-addons").
		For(object(cluster.HelmReleaseGVK), builder.WithPredicates(isAddon)).
		Complete(reconcile.Func(p.reconcileAddon)); err != nil {
		return err
	}
	if p.Options.InfraNamespace != "" {
		inInfra := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == p.Options.InfraNamespace })
		var played client.Object = &appsv1.Deployment{}
		play := p.reconcileDeployment
		if p.Options.InfraPods {
			played, play = &corev1.Pod{}, p.reconcilePod
		}
		if err := ctrl.NewControllerManagedBy(mgr).Named("localprovider-kubelet").For(played, builder.WithPredicates(inInfra)).
			Complete(reconcile.Func(play)); err != nil {
			return err
		}
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		p.stopAll()
		return nil
	}))
}

func object(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// stopAll stops every kube-apiserver the stand-in started.
func (p *Provider) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var wg sync.WaitGroup
	for key, s := range p.servers {
		wg.Go(s.stop)
		delete(p.servers, key)
	}
	wg.Wait()
}

// stopServer stops the control plane of KamajiControlPlane key and forgets its state.
func (p *Provider) stopServer(key types.NamespacedName) error {
	p.mu.Lock()
	s := p.servers[key]
	delete(p.servers, key)
	p.mu.Unlock()
	if s != nil {
		s.stop()
	}
	return os.RemoveAll(p.stateDir(key))
}

func (p *Provider) stateDir(key types.NamespacedName) string {
	return filepath.Join(p.Options.StateDir, key.Namespace, key.Name)
}

// customer returns a client of the customer's cluster from its admin kubeconfig, as the guest
// would reach its API server; nil while the kubeconfig does not exist.
func (p *Provider) customer(ctx context.Context, ns, clusterName string) (client.Client, error) {
	raw, err := kubeconfigOf(ctx, p.Client, ns, clusterName)
	if err != nil || raw == nil {
		return nil, err
	}
	key, sum := types.NamespacedName{Namespace: ns, Name: clusterName}, sha256.Sum256(raw)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[key]; ok && c.sum == sum {
		return c.client, nil
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	p.clients[key] = customerClient{sum: sum, client: c}
	return c, nil
}
