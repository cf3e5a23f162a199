package kubernetescluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// No cluster-wide rights on Secrets: the chart's ClusterRole <release>-tenant-namespaces (get,
// create, patch) is bound in every tenant namespace by the tenant-controller (its namespaceGrants),
// and a Role grants them in the infrastructure namespace. Secrets are never cached or watched
// (that would take list and watch on every namespace's): each is read when it is needed.

// KubeconfigKey is the key of the customer's kubeconfig Secret holding the kubeconfig.
const KubeconfigKey = "kubeconfig"

// reconcileKubeconfig copies the admin kubeconfig the control-plane provider wrote (Cluster API's
// <cluster>-kubeconfig Secret, key "value") into the customer's Secret. The source counts only if
// the cluster's KamajiControlPlane controls it: a Secret of that name planted by someone else is
// ignored. A Secret of the customer's name that the cluster does not control is left alone.
// Until the source is there the cluster is looked at again after Retry; the provider's status
// change (it writes the Secret first) usually brings it back sooner.
func (r *Reconciler) reconcileKubeconfig(ctx context.Context, s *scope) error {
	kc := s.kc
	kcp, err := r.owned(ctx, kc, cluster.KamajiControlPlaneGVK, cluster.ControlPlaneName(kc.Name))
	if err != nil || kcp == nil {
		return err
	}
	src := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: kc.Namespace, Name: cluster.AdminKubeconfigSecret(kc.Name)}, src); err != nil {
		s.awaitKubeconfig = apierrors.IsNotFound(err)
		return client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(src); ref == nil || ref.UID != kcp.GetUID() || len(src.Data["value"]) == 0 {
		s.awaitKubeconfig = true
		return nil
	}
	name := kc.KubeconfigSecretName()
	dst := &corev1.Secret{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: kc.Namespace, Name: name}, dst); {
	case err == nil:
		if ref := metav1.GetControllerOf(dst); ref == nil || ref.UID != kc.UID {
			msg := fmt.Sprintf("Secret %s exists and was not created by this cluster: it is left alone; delete it or name another in spec.kubeconfigSecretRef", name)
			s.stallOn(clusterapi.ControlPlaneReadyCondition, clusterapi.ConflictReason, msg)
			return nil
		}
	case client.IgnoreNotFound(err) != nil:
		return err
	}
	desired := corev1ac.Secret(name, kc.Namespace).
		WithLabels(map[string]string{clusterapi.LabelCluster: kc.Name, clusterv1.ClusterNameLabel: kc.Name}).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(clusterapi.GroupVersion.String()).WithKind("KubernetesCluster").
			WithName(kc.Name).WithUID(kc.UID).WithController(true).WithBlockOwnerDeletion(true)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{KubeconfigKey: src.Data["value"]})
	if _, err := ssa.Apply(ctx, r.Client, r.Client, types.NamespacedName{Namespace: kc.Namespace, Name: name}, &corev1.Secret{}, desired, corev1ac.ExtractSecret, FieldOwner); err != nil {
		conditions.MarkFalse(kc, clusterapi.ControlPlaneReadyCondition, clusterapi.ApplyFailedReason, err.Error())
		return err
	}
	s.adminKubeconfig = src.Data["value"]
	kc.Status.KubeconfigSecretName = name
	return nil
}

// CacheByObject limits the manager's cache of RoleBindings to the clusters' own, and of the kinds
// the clusters have in the infrastructure namespace infraNamespace (if any) to theirs there.
func CacheByObject(infraNamespace string) map[client.Object]cache.ByObject {
	exists := func(label string) labels.Selector {
		req, _ := labels.NewRequirement(label, selection.Exists, nil)
		return labels.NewSelector().Add(*req)
	}
	out := map[client.Object]cache.ByObject{
		&rbacv1.RoleBinding{}: {Label: exists(clusterapi.LabelCluster)},
	}
	if infraNamespace != "" {
		only := map[string]cache.Config{infraNamespace: {LabelSelector: exists(clusterapi.LabelClusterNamespace)}}
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.ServiceAccount{}, &corev1.ConfigMap{}} {
			out[o] = cache.ByObject{Namespaces: only}
		}
	}
	return out
}

// ClientCacheOptions reads the owned kinds as unstructured from the cache, like the typed ones,
// and Secrets past it (CacheByObject).
func ClientCacheOptions() *client.CacheOptions {
	return &client.CacheOptions{Unstructured: true, DisableFor: []client.Object{&corev1.Secret{}}}
}
