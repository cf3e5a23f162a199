// Package csistandin stands in, in tests and `make demo`, for the two things that turn a claim
// of a LINSTOR StorageClass into a volume where none can run here: the LINSTOR CSI driver's
// provisioning (its external-provisioner sidecar and CreateVolume) and kube-controller-manager's
// PersistentVolume binder. It makes the LINSTOR volume through LINSTOR's API as the driver does
// (a resource definition spawned from the class's resource group, a first replica on the node the
// scheduler selected, the rest placed by the group), the PersistentVolume the driver would, and
// binds the pair as the binder would. It is a stand-in, never part of a chart.
package csistandin

import (
	"context"
	"fmt"
	"strings"

	lapi "github.com/LINBIT/golinstor/client"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// Annotations kube-scheduler and the PV controller use.
const (
	annSelectedNode  = "volume.kubernetes.io/selected-node"
	annBindCompleted = "pv.kubernetes.io/bind-completed"
	annBoundBy       = "pv.kubernetes.io/bound-by-controller"
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

// Provisioner provisions and binds claims of the LINSTOR CSI driver's StorageClasses.
type Provisioner struct {
	client.Client
	LINSTOR *lapi.Client
}

// Reconcile provisions one claim once it may be: at once for Immediate classes, once the
// scheduler has selected a node for WaitForFirstConsumer ones.
func (p *Provisioner) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := p.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" || pvc.Spec.StorageClassName == nil || !pvc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	sc := &storagev1.StorageClass{}
	if err := p.Get(ctx, types.NamespacedName{Name: *pvc.Spec.StorageClassName}, sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	node := pvc.Annotations[annSelectedNode]
	wffc := sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
	if sc.Provisioner != storagepolicyv1.CSIDriver || (wffc && node == "") {
		return ctrl.Result{}, nil
	}
	name := "pvc-" + string(pvc.UID)
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if err := p.createVolume(ctx, name, sc.Parameters[storagepolicyv1.ParamResourceGroup], (size.Value()+1023)/1024, node); err != nil {
		return ctrl.Result{}, err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: storagepolicyv1.CSIDriver}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              sc.Name,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: storagepolicyv1.CSIDriver, VolumeHandle: name, FSType: sc.Parameters[storagepolicyv1.ParamFSType]}},
		},
	}
	if err := p.Create(ctx, pv); client.IgnoreAlreadyExists(err) != nil {
		return ctrl.Result{}, err
	}
	pv.Status.Phase = corev1.VolumeBound
	if err := p.Status().Update(ctx, pv); err != nil && !apierrors.IsConflict(err) {
		return ctrl.Result{}, err
	}
	// Bind, as the PV controller does: the claim names the volume, then reports Bound.
	before := pvc.DeepCopy()
	pvc.Spec.VolumeName = name
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations[annBindCompleted], pvc.Annotations[annBoundBy] = "yes", "yes"
	if err := p.Patch(ctx, pvc, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, err
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes, Capacity: pv.Spec.Capacity}
	return ctrl.Result{}, p.Status().Update(ctx, pvc)
}

// createVolume spawns the resource definition from the group and places it: first on node (the
// scheduler's choice, as the driver asks LINSTOR for the requested topology), then as the group says.
func (p *Provisioner) createVolume(ctx context.Context, name, group string, sizeKiB int64, node string) error {
	err := p.LINSTOR.ResourceGroups.Spawn(ctx, group, lapi.ResourceGroupSpawn{ResourceDefinitionName: name, VolumeSizes: []int64{sizeKiB}, DefinitionsOnly: true})
	if err != nil && !strings.Contains(err.Error(), "already exists") { // a retry after a partial provisioning
		return fmt.Errorf("spawning %s from resource group %s: %w", name, group, err)
	}
	if node != "" {
		if err := p.LINSTOR.Resources.Autoplace(ctx, name, lapi.AutoPlaceRequest{SelectFilter: lapi.AutoSelectFilter{PlaceCount: 1, NodeNameList: []string{node}}}); err != nil {
			return fmt.Errorf("placing %s on %s: %w", name, node, err)
		}
	}
	if err := p.LINSTOR.Resources.Autoplace(ctx, name, lapi.AutoPlaceRequest{}); err != nil {
		return fmt.Errorf("placing %s: %w", name, err)
	}
	return nil
}

// SetupWithManager watches claims.
func (p *Provisioner) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&corev1.PersistentVolumeClaim{}).Named("csi-standin").Complete(p)
}
