package localprovider

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// defaultServiceCIDR is used when the Cluster names no service network.
const defaultServiceCIDR = "10.96.0.0/12"

// reconcileControlPlane plays Kamaji for one KamajiControlPlane: a running kube-apiserver, and the
// endpoint, Secrets and status Kamaji's Cluster API provider writes.
func (p *Provider) reconcileControlPlane(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kcp := object(cluster.KamajiControlPlaneGVK)
	if err := p.Client.Get(ctx, req.NamespacedName, kcp); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return ctrl.Result{}, p.stopServer(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if kcp.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, p.deleteControlPlane(ctx, kcp)
	}
	if controllerutil.AddFinalizer(kcp, DataStoreFinalizer) {
		if err := p.Client.Update(ctx, kcp); err != nil {
			return ctrl.Result{}, err
		}
	}
	// Kamaji serves a control plane once Cluster API's Cluster refers to it.
	clusterName := kcp.GetLabels()[clusterv1.ClusterNameLabel]
	capiCluster := object(cluster.ClusterGVK)
	if clusterName == "" {
		return ctrl.Result{}, nil
	}
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: kcp.GetNamespace(), Name: clusterName}, capiCluster); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	// Kamaji serves a control plane from the DataStore it names (the stand-in: the platform's etcd
	// whatever the DataStore says, see ensureServer), and waits while there is none.
	dataStore, _, _ := unstructured.NestedString(kcp.Object, "spec", "dataStoreName")
	if err := p.Client.Get(ctx, types.NamespacedName{Name: dataStore}, object(cluster.DataStoreGVK)); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	srv, err := p.ensureServer(ctx, kcp, capiCluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	endpoint := map[string]any{"host": "127.0.0.1", "port": int64(srv.port)}
	if err := p.patchEndpoint(ctx, kcp, endpoint); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.applySecrets(ctx, kcp, clusterName, srv); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.infrastructureReady(ctx, capiCluster, endpoint); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, p.writeStatus(ctx, kcp, srv)
}

// ensureServer returns the running kube-apiserver of kcp, starting it if needed; its storage is
// the platform's etcd under the KamajiControlPlane's own schema, as Kamaji's etcd DataStore does.
func (p *Provider) ensureServer(ctx context.Context, kcp, capiCluster *unstructured.Unstructured) (*apiServer, error) {
	key := client.ObjectKeyFromObject(kcp)
	p.mu.Lock()
	s := p.servers[key]
	p.mu.Unlock()
	if s != nil && s.alive() {
		return s, nil
	}
	schema := dataStoreSchema(kcp)
	cidr := defaultServiceCIDR
	if blocks, _, _ := unstructured.NestedStringSlice(capiCluster.Object, "spec", "clusterNetwork", "services", "cidrBlocks"); len(blocks) > 0 {
		cidr = blocks[0]
	}
	s, err := startAPIServer(ctx, serverConfig{binary: p.Options.KubeAPIServer, dir: p.stateDir(key),
		etcdServers: p.Options.EtcdServers, etcdPrefix: "/" + schema, serviceCIDR: cidr})
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("Started the control plane's kube-apiserver", "port", s.port, "etcdPrefix", "/"+schema, "version", s.version)
	p.mu.Lock()
	p.servers[key] = s
	p.mu.Unlock()
	// A kube-apiserver that exits unasked is started again.
	go func() {
		<-s.exited
		p.mu.Lock()
		current := p.servers[key] == s
		p.mu.Unlock()
		if current {
			p.exits <- event.GenericEvent{Object: kcp}
		}
	}()
	return s, nil
}

// DataStoreFinalizer keeps a KamajiControlPlane until its data is gone from the DataStore, as
// Kamaji's does.
const DataStoreFinalizer = "localprovider.cluster.flotilla.dev/datastore"

// dataStoreSchema is the key prefix of kcp's data in its DataStore (without the leading slash).
func dataStoreSchema(kcp *unstructured.Unstructured) string {
	if schema, _, _ := unstructured.NestedString(kcp.Object, "spec", "dataStoreSchema"); schema != "" {
		return schema
	}
	return kcp.GetNamespace() + "_" + kcp.GetName() // Kamaji's default
}

// deleteControlPlane stops kcp's kube-apiserver and deletes its keys from the etcd, as Kamaji
// deletes a deleted control plane's data from its DataStore, then lets kcp go.
func (p *Provider) deleteControlPlane(ctx context.Context, kcp *unstructured.Unstructured) error {
	if err := p.stopServer(client.ObjectKeyFromObject(kcp)); err != nil || !controllerutil.ContainsFinalizer(kcp, DataStoreFinalizer) {
		return err
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(p.Options.EtcdServers, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer etcd.Close()
	prefix := "/" + dataStoreSchema(kcp) + "/"
	if _, err := etcd.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("deleting %s* from etcd: %w", prefix, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted the control plane's data", "etcdPrefix", prefix)
	controllerutil.RemoveFinalizer(kcp, DataStoreFinalizer)
	return p.Client.Update(ctx, kcp)
}

// patchEndpoint writes spec.controlPlaneEndpoint, as Kamaji's provider does; Cluster API copies it
// into the Cluster.
func (p *Provider) patchEndpoint(ctx context.Context, obj *unstructured.Unstructured, endpoint map[string]any) error {
	if got, _, _ := unstructured.NestedMap(obj.Object, "spec", "controlPlaneEndpoint"); reflect.DeepEqual(got, endpoint) {
		return nil
	}
	patch := map[string]any{"spec": map[string]any{"controlPlaneEndpoint": endpoint}}
	return p.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, mustJSON(patch)))
}

// applySecrets writes Cluster API's <cluster>-ca (the control plane's CA, for the bootstrap
// provider's join discovery) and <cluster>-kubeconfig (the admin kubeconfig, key value), both
// controlled by the KamajiControlPlane, as Kamaji's provider does.
func (p *Provider) applySecrets(ctx context.Context, kcp *unstructured.Unstructured, clusterName string, s *apiServer) error {
	kubeconfig, err := s.kubeconfig(clusterName)
	if err != nil {
		return err
	}
	owner := metav1ac.OwnerReference().WithAPIVersion(kcp.GetAPIVersion()).WithKind(kcp.GetKind()).
		WithName(kcp.GetName()).WithUID(kcp.GetUID()).WithController(true).WithBlockOwnerDeletion(true)
	for name, data := range map[string]map[string][]byte{
		clusterName + "-ca":         {corev1.TLSCertKey: s.pki.caCert, corev1.TLSPrivateKeyKey: s.pki.caKey},
		clusterName + "-kubeconfig": {"value": kubeconfig},
	} {
		existing := &corev1.Secret{}
		err := p.Client.Get(ctx, types.NamespacedName{Namespace: kcp.GetNamespace(), Name: name}, existing)
		if err == nil && reflect.DeepEqual(existing.Data, data) {
			continue
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		secret := corev1ac.Secret(name, kcp.GetNamespace()).
			WithLabels(map[string]string{clusterv1.ClusterNameLabel: clusterName}).
			WithOwnerReferences(owner).
			WithType(corev1.SecretType(clusterv1.ClusterSecretType)).
			WithData(data)
		if err := p.Client.Apply(ctx, secret, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return err
		}
	}
	return nil
}

// infrastructureReady completes the externally managed KubevirtCluster: CAPK leaves a cluster
// annotated cluster.x-k8s.io/managed-by to whoever manages it, here the control-plane provider,
// which gives it the endpoint and marks it ready.
func (p *Provider) infrastructureReady(ctx context.Context, capiCluster *unstructured.Unstructured, endpoint map[string]any) error {
	kind, _, _ := unstructured.NestedString(capiCluster.Object, "spec", "infrastructureRef", "kind")
	name, _, _ := unstructured.NestedString(capiCluster.Object, "spec", "infrastructureRef", "name")
	if kind != cluster.KubevirtClusterGVK.Kind || name == "" {
		return nil
	}
	kvc := object(cluster.KubevirtClusterGVK)
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: capiCluster.GetNamespace(), Name: name}, kvc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, managed := kvc.GetAnnotations()[clusterv1.ManagedByAnnotation]; !managed {
		return nil
	}
	if err := p.patchEndpoint(ctx, kvc, endpoint); err != nil {
		return err
	}
	if ready, _, _ := unstructured.NestedBool(kvc.Object, "status", "ready"); ready {
		return nil
	}
	patch := map[string]any{"status": map[string]any{"ready": true}}
	return p.Client.Status().Patch(ctx, kvc, client.RawPatch(types.MergePatchType, mustJSON(patch)))
}

// writeStatus reports the control plane as Kamaji's provider does: the version kube-apiserver
// runs, initialized, every replica ready (one process stands for them all), Available for the
// current generation. A version the stand-in's kube-apiserver binary does not run is reported
// honestly: Available=False.
func (p *Provider) writeStatus(ctx context.Context, kcp *unstructured.Unstructured, s *apiServer) error {
	want, _, _ := unstructured.NestedString(kcp.Object, "spec", "version")
	replicas, _, _ := unstructured.NestedInt64(kcp.Object, "spec", "replicas")
	available := metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "APIServerRunning",
		Message:            fmt.Sprintf("kube-apiserver %s serves at 127.0.0.1:%d (local provider stand-in)", s.version, s.port),
		ObservedGeneration: kcp.GetGeneration()}
	if s.version != want {
		available.Status, available.Reason = metav1.ConditionFalse, "VersionUnavailable"
		available.Message = fmt.Sprintf("the local provider stand-in runs kube-apiserver %s only, not %s", s.version, want)
	}
	var conditions []metav1.Condition
	if list, found, _ := unstructured.NestedSlice(kcp.Object, "status", "conditions"); found {
		if err := runtimeConvert(list, &conditions); err != nil {
			return err
		}
	}
	apimeta.SetStatusCondition(&conditions, available)
	status := map[string]any{
		"version": s.version, "ready": true, "externalManagedControlPlane": true,
		"initialization": map[string]any{"controlPlaneInitialized": true},
		"replicas":       replicas, "readyReplicas": replicas, "availableReplicas": replicas, "upToDateReplicas": replicas,
		"conditions": conditions,
	}
	var desired, got map[string]any
	if err := runtimeConvert(status, &desired); err != nil {
		return err
	}
	if err := runtimeConvert(kcp.Object["status"], &got); err != nil {
		return err
	}
	if reflect.DeepEqual(got, desired) {
		return nil
	}
	patch := map[string]any{"status": desired}
	return p.Client.Status().Patch(ctx, kcp, client.RawPatch(types.MergePatchType, mustJSON(patch)))
}
