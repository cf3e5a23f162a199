package kubernetescluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/apply"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// reconcileDatastore finds the etcd serving the cluster's tenant: the tenant-controller's label on
// the namespace decides, never the spec alone (a spec naming another tenant's etcd is refused).
// It applies the Kamaji DataStore that describes that etcd, shared by every cluster it serves.
func (r *Reconciler) reconcileDatastore(ctx context.Context, s *scope) error {
	kc := s.kc
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: kc.Namespace}, ns); err != nil {
		return err
	}
	s.ns = ns
	etcd := ns.Labels[tenancyv1.LabelEtcd]
	var msg string
	switch {
	case etcd == "":
		msg = fmt.Sprintf("no etcd serves namespace %s (label %s): a Kubernetes cluster keeps its state in its tenant's etcd; set etcd: true on the tenant or an ancestor", kc.Namespace, tenancyv1.LabelEtcd)
	case kc.Spec.ControlPlane.Etcd != nil && kc.Spec.ControlPlane.Etcd.Namespace != etcd:
		msg = fmt.Sprintf("spec.controlPlane.etcd.namespace %q is not the etcd serving this tenant (%q)", kc.Spec.ControlPlane.Etcd.Namespace, etcd)
	}
	if msg != "" {
		s.stallOn(clusterapi.ControlPlaneReadyCondition, clusterapi.NoDatastoreReason, msg)
		return nil
	}
	desired := cluster.DataStore(etcd)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(cluster.DataStoreGVK)
	switch err := r.Get(ctx, client.ObjectKeyFromObject(desired), live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return err
	case live.GetLabels()[clusterapi.LabelEtcdNamespace] != etcd:
		msg := fmt.Sprintf("DataStore %s exists and was not made by the cluster-controller for the etcd of %s", live.GetName(), etcd)
		s.stallOn(clusterapi.ControlPlaneReadyCondition, clusterapi.ConflictReason, msg)
		return nil
	case !live.GetDeletionTimestamp().IsZero():
		// Kamaji holds a DataStore that control planes use; made again once gone (the watch).
		return fmt.Errorf("DataStore %s is being deleted", live.GetName())
	}
	if _, err := ssa.ApplyUnstructured(ctx, r.Client, desired, live, FieldOwner); err != nil {
		return err
	}
	s.dataStore = desired.GetName()
	return nil
}

// reconcileReferences checks what the spec names in the management cluster: a node group's
// StorageClass must exist, or its nodes' disks would wait forever for a class nobody provides,
// and so must the scheduling class, which must not contradict the tenant's.
func (r *Reconciler) reconcileReferences(ctx context.Context, s *scope) error {
	kc := s.kc
	if msg, err := r.schedulingClassProblem(ctx, kc, s.ns); err != nil || msg != "" {
		if msg != "" {
			s.stallOn(clusterapi.ControlPlaneReadyCondition, clusterapi.UnknownReferenceReason, msg)
		}
		return err
	}
	for _, g := range kc.Spec.NodeGroups {
		if g.StorageClass == "" {
			continue
		}
		err := r.Get(ctx, types.NamespacedName{Name: g.StorageClass}, &storagev1.StorageClass{})
		if apierrors.IsNotFound(err) {
			msg := fmt.Sprintf("spec.nodeGroups[%s].storageClass: no StorageClass %q exists", g.Name, g.StorageClass)
			s.stallOn(clusterapi.WorkersReadyCondition, clusterapi.UnknownReferenceReason, msg)
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// schedulingClassProblem says what is wrong with the spec's scheduling class, if anything. The
// storage-controller places the control plane's pods and the worker VMs by it (their annotation),
// unless the namespace has a class of its own: the tenant's placement, which its clusters may not
// escape, so a spec naming another one is refused rather than silently ignored.
func (r *Reconciler) schedulingClassProblem(ctx context.Context, kc *clusterapi.KubernetesCluster, ns *corev1.Namespace) (string, error) {
	class := kc.Spec.SchedulingClass
	if class == "" {
		return "", nil
	}
	if own := ns.Labels[tenancyv1.LabelSchedulingClass]; own != "" && own != class {
		return fmt.Sprintf("spec.schedulingClass %q: namespace %s is placed by its tenant's scheduling class %q", class, ns.Name, own), nil
	}
	sc := &metav1.PartialObjectMetadata{}
	sc.SetGroupVersionKind(cluster.SchedulingClassGVK)
	err := r.Get(ctx, types.NamespacedName{Name: class}, sc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("spec.schedulingClass: no SchedulingClass %q exists", class), nil
	case meta.IsNoMatchError(err):
		return fmt.Sprintf("spec.schedulingClass %q: this platform has no scheduling classes (the storage-controller's API is not installed)", class), nil
	}
	return "", err
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
	case cluster.RoleBindingGVK, cluster.DeploymentGVK, cluster.ServiceAccountGVK, cluster.ConfigMapGVK:
		return clusterapi.CloudControllersReadyCondition
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
	// Nothing is applied while one of the names is taken by an object this cluster did not make.
	// Then each stage's objects are applied together, and their results read in Desired's order.
	live, sent, errs := make([]*unstructured.Unstructured, len(objs)), make([]bool, len(objs)), make([]error, len(objs))
	for i, obj := range objs {
		live[i], errs[i] = apply.Live(ctx, r.Client, obj)
	}
	if err := firstFailure(objs, errs, s); err != nil || s.stall != nil {
		return err
	}
	for stage := range 2 {
		var wg sync.WaitGroup
		for i, obj := range objs {
			if cluster.Stage(obj) == stage {
				wg.Go(func() { sent[i], errs[i] = ssa.ApplyUnstructured(ctx, r.Client, obj, live[i], FieldOwner) })
			}
		}
		wg.Wait()
		if err := firstFailure(objs, errs, s); err != nil || s.stall != nil {
			return err
		}
	}
	if applied := len(slices.DeleteFunc(sent, func(ok bool) bool { return !ok })); applied > 0 {
		ctrl.LoggerFrom(ctx).V(4).Info("Applied owned objects", "count", applied)
	}
	if err := r.leaveDataStore(ctx, kc, objs, live, s.dataStore); err != nil {
		return err
	}
	if err := r.pruneNodeGroups(ctx, kc, mds); err != nil {
		return err
	}
	return r.pruneTemplates(ctx, kc, objs, mds)
}

// leaveDataStore releases the DataStore the control plane used before this apply (live, read
// before it) if it is not the one it uses now: the etcd label of the cluster's namespace changed.
// The control plane has moved, so the cluster no longer counts among that DataStore's users.
func (r *Reconciler) leaveDataStore(ctx context.Context, kc *clusterapi.KubernetesCluster, objs, live []*unstructured.Unstructured, now string) error {
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GroupVersionKind() == cluster.KamajiControlPlaneGVK })
	if i < 0 || live[i] == nil {
		return nil
	}
	was, _, _ := unstructured.NestedString(live[i].Object, "spec", "dataStoreName")
	if was == "" || was == now {
		return nil
	}
	ds := &unstructured.Unstructured{}
	ds.SetGroupVersionKind(cluster.DataStoreGVK)
	if err := r.Get(ctx, types.NamespacedName{Name: was}, ds); err != nil {
		return client.IgnoreNotFound(err)
	}
	return r.releaseDataStore(ctx, ds, kc)
}

// templateRefs are the paths, in a MachineDeployment or MachineSet, of the templates it names.
var templateRefs = map[schema.GroupVersionKind][]string{
	cluster.KubevirtMachineTmplGVK:   {"spec", "template", "spec", "infrastructureRef", "name"},
	cluster.KubeadmConfigTemplateGVK: {"spec", "template", "spec", "bootstrap", "configRef", "name"},
}

// pruneTemplates deletes the node groups' templates that a change of the group superseded (their
// names follow their content). A template stays while a MachineSet names it (Cluster API makes
// machines from the MachineSets of earlier revisions during a rollout) and until Cluster API has
// seen its MachineDeployment name the new ones, so that no MachineSet of the old can still appear.
func (r *Reconciler) pruneTemplates(ctx context.Context, kc *clusterapi.KubernetesCluster, objs []*unstructured.Unstructured, mds []unstructured.Unstructured) error {
	keep := map[schema.GroupVersionKind]map[string]bool{}
	for gvk := range templateRefs {
		keep[gvk] = map[string]bool{}
	}
	desired := map[string]*unstructured.Unstructured{} // node group → its MachineDeployment, as applied
	for _, o := range objs {
		if names, ok := keep[o.GroupVersionKind()]; ok {
			names[o.GetName()] = true
		}
		if o.GroupVersionKind() == cluster.MachineDeploymentGVK {
			desired[o.GetLabels()[clusterapi.LabelNodeGroup]] = o
		}
	}
	sets := &unstructured.UnstructuredList{}
	sets.SetGroupVersionKind(cluster.MachineSetGVK.GroupVersion().WithKind("MachineSetList"))
	if err := r.List(ctx, sets, client.InNamespace(kc.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: kc.Name}); err != nil {
		return err
	}
	for _, ms := range sets.Items {
		for gvk, path := range templateRefs {
			if name, _, _ := unstructured.NestedString(ms.Object, path...); name != "" {
				keep[gvk][name] = true
			}
		}
	}
	settled := map[string]bool{} // node groups whose MachineDeployment Cluster API has seen as desired
	for i := range mds {
		md, group := &mds[i], mds[i].GetLabels()[clusterapi.LabelNodeGroup]
		want := desired[group]
		observed, _, _ := unstructured.NestedInt64(md.Object, "status", "observedGeneration")
		settled[group] = want != nil && observed == md.GetGeneration() && sameRefs(md, want)
	}
	for gvk := range templateRefs {
		templates, err := r.ownedList(ctx, kc, gvk)
		if err != nil {
			return err
		}
		for i := range templates {
			t := &templates[i]
			group := t.GetLabels()[clusterapi.LabelNodeGroup]
			_, hasMD := settled[group]
			if keep[gvk][t.GetName()] || !t.GetDeletionTimestamp().IsZero() || (hasMD && !settled[group]) || (!hasMD && desired[group] != nil) {
				continue
			}
			if err := r.Delete(ctx, t, client.Preconditions{UID: ptrUID(t)}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting superseded %s %s: %w", gvk.Kind, t.GetName(), err)
			}
		}
	}
	return nil
}

// sameRefs reports whether MachineDeployment md names the templates want names.
func sameRefs(md, want *unstructured.Unstructured) bool {
	for _, path := range templateRefs {
		a, _, _ := unstructured.NestedString(md.Object, path...)
		b, _, _ := unstructured.NestedString(want.Object, path...)
		if a != b {
			return false
		}
	}
	return true
}

// firstFailure marks the first object, in Desired's order, that could not be applied: one the
// controller does not own stalls the cluster; any other error is returned.
func firstFailure(objs []*unstructured.Unstructured, errs []error, s *scope) error {
	for i, obj := range objs {
		err := errs[i]
		if errors.Is(err, apply.ErrNotOwned) {
			msg := err.Error() + ": it is left alone; delete it or rename the cluster"
			s.stallOn(conditionOf(obj.GroupVersionKind()), clusterapi.ConflictReason, msg)
			return nil
		}
		if err != nil {
			conditions.MarkFalse(s.kc, conditionOf(obj.GroupVersionKind()), clusterapi.ApplyFailedReason, err.Error())
			return err
		}
	}
	return nil
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

// ownedList lists the objects of gvk labelled for kc and controlled by it: in its namespace, or
// for the kinds of the infrastructure namespace, there (none where the platform has none).
func (r *Reconciler) ownedList(ctx context.Context, kc *clusterapi.KubernetesCluster, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	ns, labels := kc.Namespace, client.MatchingLabels{clusterapi.LabelCluster: kc.Name}
	if slices.Contains(cluster.InfraKinds, gvk) {
		if r.Options.InfraNamespace == "" {
			return nil, nil
		}
		ns, labels[clusterapi.LabelClusterNamespace] = r.Options.InfraNamespace, kc.Namespace
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.List(ctx, list, client.InNamespace(ns), labels); err != nil {
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

// controlledBy: o's controller reference is kc, or (in the infrastructure namespace, where no
// owner reference can point) its owner annotation holds kc's UID.
func controlledBy(o client.Object, kc *clusterapi.KubernetesCluster) bool {
	if o.GetNamespace() != kc.Namespace {
		return o.GetAnnotations()[clusterapi.AnnotationOwner] == string(kc.UID)
	}
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
