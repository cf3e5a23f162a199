package kubernetescluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// deletionStages are torn down in order, each only once the one before is gone: the workers
// (whose machines drain against a working control plane), then the add-ons, then the cloud
// controllers, the control plane and the infrastructure, and last what the cloud controllers made.
var deletionStages = []struct {
	name  string
	kinds []schema.GroupVersionKind
	// suffix, if set, limits the stage to the objects whose names end in it.
	suffix string
	// made: the stage's objects are not the cluster's own but what its cloud controllers made for
	// it (madeByCloudControllers).
	made bool
}{
	// Nothing may scale a cluster being deleted.
	{name: "autoscaler", kinds: []schema.GroupVersionKind{cluster.DeploymentGVK}, suffix: "-" + cluster.AutoscalerSuffix},
	{name: "workers", kinds: []schema.GroupVersionKind{cluster.MachineHealthCheckGVK, cluster.MachineDeploymentGVK}},
	{name: "worker templates", kinds: []schema.GroupVersionKind{cluster.KubeadmConfigTemplateGVK, cluster.KubevirtMachineTmplGVK}},
	// helm-controller uninstalls an add-on from the customer's cluster, which must still be there.
	{name: "add-ons", kinds: []schema.GroupVersionKind{cluster.HelmReleaseGVK, cluster.HelmRepositoryGVK, cluster.ClusterResourceSetGVK}},
	// The CSI controller detaches the workers' volumes and the CCM lets go of the Services: both
	// go once the workers have.
	{name: "cloud controllers", kinds: append([]schema.GroupVersionKind{cluster.RoleBindingGVK}, cluster.InfraKinds...)},
	{name: "control plane", kinds: []schema.GroupVersionKind{cluster.ClusterGVK, cluster.KamajiControlPlaneGVK, cluster.KubevirtClusterGVK}},
	// With the customer's cluster goes whatever would have told them to release these.
	{name: "load balancers and volumes", kinds: []schema.GroupVersionKind{serviceGVK, cluster.DataVolumeGVK}, made: true},
}

// reconcileDelete deletes the owned objects stage by stage, says in Ready what it waits for, and
// removes the finalizer once nothing is left. Only objects the cluster controls, or its cloud
// controllers made for it, are deleted.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	kc := s.kc
	for _, stage := range deletionStages {
		var left []string
		for _, gvk := range stage.kinds {
			list := r.ownedList
			if stage.made {
				list = r.madeByCloudControllers
			}
			objs, err := list(ctx, kc, gvk)
			if err != nil {
				return ctrl.Result{}, err
			}
			for i := range objs {
				o := &objs[i]
				if !strings.HasSuffix(o.GetName(), stage.suffix) {
					continue
				}
				left = append(left, gvk.Kind+"/"+o.GetName())
				if o.GetDeletionTimestamp().IsZero() {
					if err := r.Delete(ctx, o, client.Preconditions{UID: ptrUID(o)}); client.IgnoreNotFound(err) != nil {
						return ctrl.Result{}, fmt.Errorf("deleting %s %s: %w", gvk.Kind, o.GetName(), err)
					}
				}
			}
		}
		if len(left) > 0 {
			conditions.MarkDeleting(kc, fmt.Sprintf("Deleting the %s: waiting for %s to go", stage.name, strings.Join(left, ", ")))
			return ctrl.Result{RequeueAfter: r.Retry}, nil
		}
	}
	if err := r.deleteInfraKubeconfig(ctx, kc); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.releaseDataStores(ctx, kc); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, kc, Finalizer)
}

// releaseDataStores deletes the DataStores the cluster-controller made that no cluster but those
// being deleted uses any more: the last cluster an etcd serves takes its DataStore with it (also
// one the cluster no longer used, its namespace's etcd having changed while the controller was not
// there to see it). Kamaji holds a DataStore that a control plane still uses until that one is
// gone, so clusters being deleted together need not wait for each other.
func (r *Reconciler) releaseDataStores(ctx context.Context, kc *clusterapi.KubernetesCluster) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(cluster.DataStoreGVK.GroupVersion().WithKind(cluster.DataStoreGVK.Kind + "List"))
	if err := r.List(ctx, list, client.HasLabels{clusterapi.LabelEtcdNamespace}); err != nil {
		return err
	}
	for i := range list.Items {
		if err := r.releaseDataStore(ctx, &list.Items[i], kc); err != nil {
			return err
		}
	}
	return nil
}

// releaseDataStore deletes ds if the cluster-controller made it and no cluster other than leaving
// (which goes, or uses another etcd now) and those being deleted uses it.
func (r *Reconciler) releaseDataStore(ctx context.Context, ds *unstructured.Unstructured, leaving *clusterapi.KubernetesCluster) error {
	etcd := ds.GetLabels()[clusterapi.LabelEtcdNamespace]
	if etcd == "" || ds.GetName() != cluster.DataStoreName(etcd) || !ds.GetDeletionTimestamp().IsZero() {
		return nil
	}
	users, err := r.clustersOfEtcd(ctx, etcd)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(users, func(u clusterapi.KubernetesCluster) bool { return u.UID != leaving.UID && u.DeletionTimestamp.IsZero() }) {
		return nil
	}
	if err := r.Delete(ctx, ds, client.Preconditions{UID: ptrUID(ds)}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting DataStore %s: %w", ds.GetName(), err)
	}
	return nil
}

// Listing and deleting Services and DataVolumes: in tenant namespaces only, through the chart's
// ClusterRole <release>-tenant-namespaces (see kubernetescluster_kubeconfig.go).

var serviceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Service"}

// madeByCloudControllers lists what the cluster's cloud controllers made of kind gvk in its
// namespace: the CCM's Services of the customer's LoadBalancer Services (which carry the customer
// Service's name too), and the CSI controller's DataVolumes of the customer's volumes. They are
// known by the cluster's name and UID among their labels (cluster.InfraLabels); read past the
// cache, which holds neither kind, on deletion only. A DataVolume takes its claim with it unless
// the app's volume policy kept the claim (the apps API then removed the claim's owner reference).
// A platform without CDI has no DataVolumes. Labels can be written by the tenant: only objects
// without a controller are taken.
func (r *Reconciler) madeByCloudControllers(ctx context.Context, kc *clusterapi.KubernetesCluster, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	if r.Options.InfraNamespace == "" {
		return nil, nil
	}
	opts := []client.ListOption{client.InNamespace(kc.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: kc.Name, clusterapi.LabelClusterUID: string(kc.UID)}}
	if gvk == serviceGVK {
		opts = append(opts, client.HasLabels{clusterapi.LabelTenantService})
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.APIReader.List(ctx, list, opts...); err != nil && !meta.IsNoMatchError(err) {
		return nil, err
	}
	// The cloud controllers set no controller: an object with one (a VM's disk, an app's Service)
	// is someone else's, whatever its labels say.
	return slices.DeleteFunc(list.Items, func(o unstructured.Unstructured) bool { return metav1.GetControllerOf(&o) != nil }), nil
}

// deleteInfraKubeconfig deletes the cluster's copy of its kubeconfig in the infrastructure
// namespace, if the cluster's.
func (r *Reconciler) deleteInfraKubeconfig(ctx context.Context, kc *clusterapi.KubernetesCluster) error {
	if r.Options.InfraNamespace == "" {
		return nil
	}
	secret := &corev1.Secret{}
	err := r.Get(ctx, types.NamespacedName{Namespace: r.Options.InfraNamespace, Name: cluster.InfraKubeconfigSecret(kc.Namespace, kc.Name)}, secret)
	if err != nil || !controlledBy(secret, kc) {
		return client.IgnoreNotFound(err)
	}
	return client.IgnoreNotFound(r.Delete(ctx, secret, client.Preconditions{UID: ptrUID(secret)}))
}
