package kubernetescluster

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/apply"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// reconcileDatastore finds the etcd serving the cluster's tenant: the tenant-controller's label on
// the namespace decides, never the spec alone (a spec naming another tenant's etcd is refused).
func (r *Reconciler) reconcileDatastore(ctx context.Context, s *scope) error {
	kc := s.kc
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: kc.Namespace}, ns); err != nil {
		return err
	}
	etcd := ns.Labels[tenancyv1.LabelEtcd]
	var msg string
	switch {
	case etcd == "":
		msg = fmt.Sprintf("no etcd serves namespace %s (label %s): a Kubernetes cluster keeps its state in its tenant's etcd; set etcd: true on the tenant or an ancestor", kc.Namespace, tenancyv1.LabelEtcd)
	case kc.Spec.ControlPlane.Etcd != nil && kc.Spec.ControlPlane.Etcd.Namespace != etcd:
		msg = fmt.Sprintf("spec.controlPlane.etcd.namespace %q is not the etcd serving this tenant (%q)", kc.Spec.ControlPlane.Etcd.Namespace, etcd)
	}
	if msg != "" {
		conditions.MarkFalse(kc, clusterapi.ControlPlaneReadyCondition, clusterapi.NoDatastoreReason, msg)
		s.stall = &conditions.Stall{Reason: clusterapi.NoDatastoreReason, Message: msg}
		return nil
	}
	s.dataStore = cluster.DataStoreName(etcd)
	return nil
}

// reconcileReferences checks what the spec names in the management cluster: a node group's
// StorageClass must exist, or its nodes' disks would wait forever for a class nobody provides.
func (r *Reconciler) reconcileReferences(ctx context.Context, s *scope) error {
	kc := s.kc
	for _, g := range kc.Spec.NodeGroups {
		if g.StorageClass == "" {
			continue
		}
		err := r.Get(ctx, types.NamespacedName{Name: g.StorageClass}, &storagev1.StorageClass{})
		if apierrors.IsNotFound(err) {
			msg := fmt.Sprintf("spec.nodeGroups[%s].storageClass: no StorageClass %q exists", g.Name, g.StorageClass)
			conditions.MarkFalse(kc, clusterapi.WorkersReadyCondition, clusterapi.UnknownReferenceReason, msg)
			s.stall = &conditions.Stall{Reason: clusterapi.UnknownReferenceReason, Message: msg}
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// conditionOf is the condition an owned kind reports into.
func conditionOf(gvk schema.GroupVersionKind) string {
	switch gvk {
	case cluster.ClusterGVK, cluster.KubevirtClusterGVK:
		return clusterapi.InfrastructureReadyCondition
	case cluster.KamajiControlPlaneGVK:
		return clusterapi.ControlPlaneReadyCondition
	case cluster.HelmRepositoryGVK, cluster.HelmReleaseGVK, cluster.ClusterResourceSetGVK:
		return clusterapi.AddonsReadyCondition
	}
	return clusterapi.WorkersReadyCondition
}

// reconcileObjects applies every owned object, in order, and removes the MachineDeployments of
// node groups that are gone.
func (r *Reconciler) reconcileObjects(ctx context.Context, s *scope) error {
	kc := s.kc
	mds, err := r.machineDeployments(ctx, kc)
	if err != nil {
		return err
	}
	replicas := map[string]int32{}
	for _, md := range mds {
		if n, ok, _ := unstructured.NestedInt64(md.Object, "spec", "replicas"); ok {
			replicas[md.GetLabels()[clusterapi.LabelNodeGroup]] = int32(n)
		}
	}
	workers, err := r.workerVersion(ctx, kc, mds)
	if err != nil {
		return err
	}
	objs, err := cluster.Desired(cluster.Inputs{Cluster: kc, DataStore: s.dataStore, Replicas: replicas, WorkerVersion: workers}, r.Options)
	if err != nil {
		return err
	}
	applied := 0
	for _, obj := range objs {
		sent, err := apply.Apply(ctx, r.Client, r.Client, obj, FieldOwner)
		if errors.Is(err, apply.ErrNotOwned) {
			msg := err.Error() + ": it is left alone; delete it or rename the cluster"
			conditions.MarkFalse(kc, conditionOf(obj.GroupVersionKind()), clusterapi.ConflictReason, msg)
			s.stall = &conditions.Stall{Reason: clusterapi.ConflictReason, Message: msg}
			return nil
		}
		if err != nil {
			conditions.MarkFalse(kc, conditionOf(obj.GroupVersionKind()), clusterapi.ApplyFailedReason, err.Error())
			return err
		}
		if sent {
			applied++
		}
	}
	if applied > 0 {
		ctrl.LoggerFrom(ctx).V(4).Info("Applied owned objects", "count", applied)
	}
	return r.pruneNodeGroups(ctx, kc, mds)
}

// workerVersion is the release the workers may run: the control plane's target once the control
// plane reports running it, until then what the workers run now.
func (r *Reconciler) workerVersion(ctx context.Context, kc *clusterapi.KubernetesCluster, mds []unstructured.Unstructured) (string, error) {
	target := r.Options.Release(kc.Spec.Version)
	if len(mds) == 0 {
		return target, nil
	}
	current, _, _ := unstructured.NestedString(mds[0].Object, "spec", "template", "spec", "version")
	if current == target || current == "" {
		return target, nil
	}
	kcp, err := r.owned(ctx, kc, cluster.KamajiControlPlaneGVK, cluster.ControlPlaneName(kc.Name))
	if err != nil || kcp == nil {
		return current, err
	}
	specVersion, _, _ := unstructured.NestedString(kcp.Object, "spec", "version")
	statusVersion, _, _ := unstructured.NestedString(kcp.Object, "status", "version")
	if available, _, _ := conditionCurrent(kcp, "Available"); specVersion == target && statusVersion == target && available {
		return target, nil
	}
	return current, nil
}

// pruneNodeGroups deletes the MachineDeployments of node groups no longer in the spec (the API
// refuses removing a group that still has machines).
func (r *Reconciler) pruneNodeGroups(ctx context.Context, kc *clusterapi.KubernetesCluster, mds []unstructured.Unstructured) error {
	want := map[string]bool{}
	for _, g := range kc.Spec.NodeGroups {
		want[cluster.MachineDeploymentName(kc.Name, g.Name)] = true
	}
	for i := range mds {
		if md := &mds[i]; !want[md.GetName()] && md.GetDeletionTimestamp().IsZero() {
			if err := r.Delete(ctx, md, client.Preconditions{UID: ptrUID(md)}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting MachineDeployment %s of a removed node group: %w", md.GetName(), err)
			}
		}
	}
	return nil
}

// machineDeployments lists the cluster's MachineDeployments: labelled for it and controlled by it.
func (r *Reconciler) machineDeployments(ctx context.Context, kc *clusterapi.KubernetesCluster) ([]unstructured.Unstructured, error) {
	return r.ownedList(ctx, kc, cluster.MachineDeploymentGVK)
}

// ownedList lists the objects of gvk labelled for kc and controlled by it.
func (r *Reconciler) ownedList(ctx context.Context, kc *clusterapi.KubernetesCluster, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.List(ctx, list, client.InNamespace(kc.Namespace), client.MatchingLabels{clusterapi.LabelCluster: kc.Name}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, o := range list.Items {
		if controlledBy(&o, kc) {
			out = append(out, o)
		}
	}
	return out, nil
}

// owned returns the object of gvk and name if it exists and kc controls it.
func (r *Reconciler) owned(ctx context.Context, kc *clusterapi.KubernetesCluster, gvk schema.GroupVersionKind, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := r.Get(ctx, types.NamespacedName{Namespace: kc.Namespace, Name: name}, u); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !controlledBy(u, kc) {
		return nil, nil
	}
	return u, nil
}

func controlledBy(o *unstructured.Unstructured, kc *clusterapi.KubernetesCluster) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.UID == kc.UID {
			return true
		}
	}
	return false
}

func ptrUID(o client.Object) *types.UID {
	uid := o.GetUID()
	return &uid
}
