package kubernetescluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=helmrepositories,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=addons.cluster.x-k8s.io,resources=clusterresourcesets,verbs=get;list;watch;create;patch;delete

// reconcileAddons writes the Secret the add-ons' ClusterResourceSet applies inside the customer's
// cluster (the add-ons' identity there; the Flux objects are among the owned objects), and
// deletes the HelmReleases of add-ons turned off, and the add-ons' source when none is left.
func (r *Reconciler) reconcileAddons(ctx context.Context, s *scope) error {
	kc := s.kc
	want := map[string]bool{}
	for _, a := range cluster.Addons(kc, r.Options) {
		want[cluster.AddonReleaseName(kc.Name, a)] = true
	}
	for _, gvk := range []schema.GroupVersionKind{cluster.HelmReleaseGVK, cluster.HelmRepositoryGVK, cluster.ClusterResourceSetGVK} {
		objs, err := r.ownedList(ctx, kc, gvk)
		if err != nil {
			return err
		}
		for i := range objs {
			o := &objs[i]
			if want[o.GetName()] || (gvk != cluster.HelmReleaseGVK && len(want) > 0) || !o.GetDeletionTimestamp().IsZero() {
				continue
			}
			if err := r.Delete(ctx, o, client.Preconditions{UID: ptrUID(o)}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s %s of an add-on turned off: %w", gvk.Kind, o.GetName(), err)
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	desired, err := cluster.AddonsAccess(kc)
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: kc.Namespace, Name: cluster.AddonsName(kc.Name)}
	if _, err := ssa.Apply(ctx, r.Client, r.Client, key, &corev1.Secret{}, desired, corev1ac.ExtractSecret, FieldOwner); err != nil {
		conditions.MarkFalse(kc, clusterapi.AddonsReadyCondition, clusterapi.ApplyFailedReason, err.Error())
		return err
	}
	return nil
}

// setAddonsReady counts the add-ons whose HelmRelease reports its current generation Ready.
func setAddonsReady(kc *clusterapi.KubernetesCluster, names []string, releases []unstructured.Unstructured) {
	if len(names) == 0 {
		conditions.MarkTrue(kc, clusterapi.AddonsReadyCondition, clusterapi.ReconciledReason, "No add-ons")
		return
	}
	byName := map[string]*unstructured.Unstructured{}
	for i := range releases {
		byName[releases[i].GetName()] = &releases[i]
	}
	ready, reported, parts := 0, true, make([]string, 0, len(names))
	for _, a := range names {
		ok, rep, msg := conditionCurrent(byName[cluster.AddonReleaseName(kc.Name, a)], "Ready")
		if ok {
			ready++
			continue
		}
		reported = reported && rep
		parts = append(parts, a+": "+msg)
	}
	if ready == len(names) {
		conditions.MarkTrue(kc, clusterapi.AddonsReadyCondition, clusterapi.ReconciledReason, fmt.Sprintf("%d/%d add-ons installed", ready, len(names)))
		return
	}
	conditions.MarkFalse(kc, clusterapi.AddonsReadyCondition, reasonOf(reported),
		fmt.Sprintf("%d/%d add-ons installed; %s", ready, len(names), strings.Join(parts, "; ")))
}
