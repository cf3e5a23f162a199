package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	lapi "github.com/LINBIT/golinstor/client"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	storagev1ac "k8s.io/client-go/applyconfigurations/storage/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/webhook"
)

func containsFinalizer(p *storagepolicyv1.StoragePolicy) bool {
	return controllerutil.ContainsFinalizer(p, Finalizer)
}

// linstorFailed records a failed LINSTOR call on the condition of the phase that made it: an
// API error (LINSTOR answered, and refused) there, no answer at all on LinstorReachable.
func linstorFailed(p *storagepolicyv1.StoragePolicy, cond string, err error) error {
	var rc lapi.ApiCallError
	if errors.As(err, &rc) {
		conditions.MarkTrue(p, storagepolicyv1.LinstorReachableCondition, storagepolicyv1.ReconciledReason, "LINSTOR answers")
		conditions.MarkFalse(p, cond, storagepolicyv1.LinstorErrorReason, err.Error())
	} else {
		conditions.MarkFalse(p, storagepolicyv1.LinstorReachableCondition, storagepolicyv1.LinstorUnreachableReason, err.Error())
	}
	return err
}

// reconcileResourceGroup creates or corrects the policy's LINSTOR resource group. A group of the
// policy's name that Flotilla did not create is left alone.
func (r *Reconciler) reconcileResourceGroup(ctx context.Context, s *scope) error {
	p := s.policy
	desired := storage.DesiredResourceGroup(p)
	groups, err := r.LINSTOR.ResourceGroups(ctx)
	if err != nil {
		return linstorFailed(p, storagepolicyv1.ResourceGroupReadyCondition, err)
	}
	conditions.MarkTrue(p, storagepolicyv1.LinstorReachableCondition, storagepolicyv1.ReconciledReason, "LINSTOR answers")
	p.Status.ResourceGroup = desired.Name
	current, found := groups[desired.Name]
	switch {
	case !found:
		if err := r.LINSTOR.CreateResourceGroup(ctx, desired); err != nil {
			return linstorFailed(p, storagepolicyv1.ResourceGroupReadyCondition, fmt.Errorf("creating resource group %s: %w", desired.Name, err))
		}
	case current.Props[storage.PropPolicy] != p.Name:
		msg := fmt.Sprintf("LINSTOR resource group %s exists and was not created for this policy (its %s is %q): it is left alone; rename the policy or remove the group",
			desired.Name, storage.PropPolicy, current.Props[storage.PropPolicy])
		conditions.MarkFalse(p, storagepolicyv1.ResourceGroupReadyCondition, storagepolicyv1.ResourceGroupConflictReason, msg)
		s.stall = &conditions.Stall{Reason: storagepolicyv1.ResourceGroupConflictReason, Message: msg}
		return nil
	default:
		change := storage.Diff(current.Props, current.Filter, desired)
		if !change.Grow && len(storage.UnderReplicated(r.View.Volumes(), desired.Name, desired.Filter.PlaceCount)) > 0 {
			change.Grow = true
		}
		if !change.Empty() {
			if err := r.LINSTOR.ModifyResourceGroup(ctx, desired.Name, change, desired.Filter); err != nil {
				return linstorFailed(p, storagepolicyv1.ResourceGroupReadyCondition, fmt.Errorf("modifying resource group %s: %w", desired.Name, err))
			}
		}
	}
	conditions.MarkTrue(p, storagepolicyv1.ResourceGroupReadyCondition, storagepolicyv1.ReconciledReason, "Resource group "+desired.Name+" matches the policy")
	return nil
}

// reconcileAdmission makes the claim webhook's match condition name the StorageClass of every
// policy, this one included, before the class exists. Claims of other classes never reach the
// webhook, so that they are admitted even while the storage-controller is down, and claims of
// Flotilla's classes are refused then (the webhook fails closed).
func (r *Reconciler) reconcileAdmission(ctx context.Context, s *scope) error {
	if r.WebhookConfiguration == "" {
		return nil
	}
	var list storagepolicyv1.StoragePolicyList
	if err := r.List(ctx, &list); err != nil {
		return err
	}
	names := []string{s.policy.Name}
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	desired := admissionregistrationv1ac.ValidatingWebhookConfiguration(r.WebhookConfiguration).WithWebhooks(
		admissionregistrationv1ac.ValidatingWebhook().WithName(webhook.Name).WithMatchConditions(
			admissionregistrationv1ac.MatchCondition().WithName(storage.MatchConditionName).WithExpression(storage.MatchClasses(names))))
	if _, err := ssa.Apply(ctx, r.Client, r.Client, types.NamespacedName{Name: r.WebhookConfiguration}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		desired, admissionregistrationv1ac.ExtractValidatingWebhookConfiguration, storage.FieldOwner); err != nil {
		msg := fmt.Sprintf("the claim webhook %s in ValidatingWebhookConfiguration %s cannot be made to check this class (%v): the StorageClass waits", webhook.Name, r.WebhookConfiguration, err)
		conditions.MarkFalse(s.policy, storagepolicyv1.StorageClassReadyCondition, storagepolicyv1.AdmissionNotReadyReason, msg)
		return err
	}
	return nil
}

// reconcileStorageClass applies the policy's StorageClass. A StorageClass cannot change its
// parameters: when the policy asks for others, the class is made anew only if no volume uses it;
// otherwise the policy reports which field cannot take effect.
func (r *Reconciler) reconcileStorageClass(ctx context.Context, s *scope) error {
	p := s.policy
	p.Status.StorageClassName = p.Name
	sc := &storagev1.StorageClass{}
	err := r.Get(ctx, types.NamespacedName{Name: p.Name}, sc)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case !storage.Owned(sc, p.Name):
		msg := fmt.Sprintf("StorageClass %s exists and was not made by Flotilla (it has no %s=%s label): it is left alone; rename the policy or remove the class",
			sc.Name, storagepolicyv1.LabelPolicy, p.Name)
		conditions.MarkFalse(p, storagepolicyv1.StorageClassReadyCondition, storagepolicyv1.StorageClassConflictReason, msg)
		s.stall = &conditions.Stall{Reason: storagepolicyv1.StorageClassConflictReason, Message: msg}
		return nil
	default:
		if mismatch := storage.ImmutableMismatch(p, sc); mismatch != "" {
			users, err := r.volumesOfClass(ctx, sc.Name)
			if err != nil {
				return err
			}
			if len(users) > 0 {
				msg := fmt.Sprintf("%s, and %d volumes use it (%s); a StorageClass cannot change: set the field back, or make a new policy for new volumes",
					mismatch, len(users), strings.Join(users, ", "))
				conditions.MarkFalse(p, storagepolicyv1.StorageClassReadyCondition, storagepolicyv1.StorageClassImmutableReason, msg)
				s.stall = &conditions.Stall{Reason: storagepolicyv1.StorageClassImmutableReason, Message: msg}
				return nil
			}
			// No volume uses the class: make it anew with the new parameters.
			if err := r.Delete(ctx, sc, client.Preconditions{UID: &sc.UID, ResourceVersion: &sc.ResourceVersion}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("replacing StorageClass %s: %w", sc.Name, err)
			}
		}
	}
	if _, err := ssa.Apply(ctx, r.Client, r.Client, types.NamespacedName{Name: p.Name}, &storagev1.StorageClass{},
		storage.StorageClass(p), storagev1ac.ExtractStorageClass, storage.FieldOwner); err != nil {
		return err
	}
	conditions.MarkTrue(p, storagepolicyv1.StorageClassReadyCondition, storagepolicyv1.ReconciledReason, "StorageClass "+p.Name+" matches the policy")
	return nil
}

// volumesOfClass names the claims and volumes of StorageClass name.
func (r *Reconciler) volumesOfClass(ctx context.Context, name string) ([]string, error) {
	var out []string
	var pvs corev1.PersistentVolumeList
	if err := r.APIReader.List(ctx, &pvs); err != nil {
		return nil, err
	}
	for _, pv := range pvs.Items {
		if pv.Spec.StorageClassName == name {
			out = append(out, "PersistentVolume "+pv.Name)
		}
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.APIReader.List(ctx, &pvcs); err != nil {
		return nil, err
	}
	for _, pvc := range pvcs.Items {
		if pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == name && pvc.Spec.VolumeName == "" {
			out = append(out, "PersistentVolumeClaim "+pvc.Namespace+"/"+pvc.Name)
		}
	}
	return out, nil
}

// reconcileCapacity reports, from the view of LINSTOR, each qualifying pool's capacity and the
// largest volume the policy can still place.
func (r *Reconciler) reconcileCapacity(ctx context.Context, s *scope) error {
	p := s.policy
	nodes, err := r.View.Nodes(ctx)
	if err != nil {
		return linstorFailed(p, storagepolicyv1.PlaceableCondition, err)
	}
	pl := storage.PlacementOf(p)
	c := storage.Compute(nodes, pl)
	p.Status.Pools = nil
	for _, cand := range c.Pools {
		p.Status.Pools = append(p.Status.Pools, storagepolicyv1.PoolCapacity{
			Node: cand.Node, Pool: cand.Pool, Topology: cand.Topology,
			Free: kib(cand.FreeKiB), Total: kib(cand.TotalKiB),
		})
	}
	largest := kib(c.LargestKiB)
	p.Status.LargestVolume = &largest
	if c.Limit == nil {
		conditions.MarkFalse(p, storagepolicyv1.PlaceableCondition, storagepolicyv1.NoCapacityReason,
			fmt.Sprintf("%d replicas need as many distinct nodes or zones: %s", pl.Replicas, c.Shortage(pl)))
		return nil
	}
	conditions.MarkTrue(p, storagepolicyv1.PlaceableCondition, storagepolicyv1.ReconciledReason,
		fmt.Sprintf("The largest volume that fits is %s", storage.HumanKiB(c.LargestKiB)))
	return nil
}

func kib(n int64) resource.Quantity { return *resource.NewQuantity(n*1024, resource.BinarySI) }

// reconcileDelete removes the StorageClass at once (no new volumes), then the resource group once
// no volume uses it; volumes are never deleted on a policy's behalf. What holds the policy is
// named on Ready.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.policy
	if !containsFinalizer(p) {
		return ctrl.Result{}, nil
	}
	name := storagepolicyv1.ResourceGroupName(p.Name)
	conditions.MarkDeleting(p, fmt.Sprintf("Deleting the StorageClass, then resource group %s", name))
	sc := &storagev1.StorageClass{}
	err := r.Get(ctx, types.NamespacedName{Name: p.Name}, sc)
	switch {
	case err == nil && storage.Owned(sc, p.Name) && sc.DeletionTimestamp.IsZero():
		if err := r.Delete(ctx, sc, client.Preconditions{UID: &sc.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	groups, err := r.LINSTOR.ResourceGroups(ctx)
	if err != nil {
		return ctrl.Result{}, deletionWaitsForLINSTOR(p, err)
	}
	if g, found := groups[name]; found && g.Props[storage.PropPolicy] == p.Name {
		volumes, err := r.LINSTOR.VolumesOf(ctx, name)
		if err != nil {
			return ctrl.Result{}, deletionWaitsForLINSTOR(p, err)
		}
		if len(volumes) > 0 {
			msg := fmt.Sprintf("Deletion waits for %d volumes in resource group %s (%s): delete their claims first", len(volumes), name, strings.Join(first(volumes, 5), ", "))
			conditions.MarkFalse(p, storagepolicyv1.ResourceGroupReadyCondition, fmeta.DeletingReason, msg)
			conditions.MarkDeleting(p, msg)
			return ctrl.Result{RequeueAfter: r.Retry}, nil
		}
		if err := r.LINSTOR.DeleteResourceGroup(ctx, name); err != nil {
			return ctrl.Result{}, deletionWaitsForLINSTOR(p, err)
		}
	}
	return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, p, Finalizer)
}

// deletionWaitsForLINSTOR records a LINSTOR failure during deletion on the domain conditions and
// on Ready (which is not summarised while the policy is being deleted).
func deletionWaitsForLINSTOR(p *storagepolicyv1.StoragePolicy, err error) error {
	err = linstorFailed(p, storagepolicyv1.ResourceGroupReadyCondition, err)
	conditions.MarkDeleting(p, "Deletion waits for LINSTOR: "+err.Error())
	return err
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
