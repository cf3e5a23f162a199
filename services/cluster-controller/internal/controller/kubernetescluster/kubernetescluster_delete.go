package kubernetescluster

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// deletionStages are torn down in order, each only once the one before is gone: the workers
// (whose machines drain against a working control plane), then the add-ons, then the control
// plane and the infrastructure.
var deletionStages = []struct {
	name  string
	kinds []schema.GroupVersionKind
}{
	{"workers", []schema.GroupVersionKind{cluster.MachineHealthCheckGVK, cluster.MachineDeploymentGVK}},
	{"worker templates", []schema.GroupVersionKind{cluster.KubeadmConfigTemplateGVK, cluster.KubevirtMachineTmplGVK}},
	// helm-controller uninstalls an add-on from the customer's cluster, which must still be there.
	{"add-ons", []schema.GroupVersionKind{cluster.HelmReleaseGVK, cluster.HelmRepositoryGVK, cluster.ClusterResourceSetGVK}},
	{"control plane", []schema.GroupVersionKind{cluster.ClusterGVK, cluster.KamajiControlPlaneGVK, cluster.KubevirtClusterGVK}},
}

// reconcileDelete deletes the owned objects stage by stage, says in Ready what it waits for, and
// removes the finalizer once nothing is left. Only objects the cluster controls are deleted.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	kc := s.kc
	for _, stage := range deletionStages {
		var left []string
		for _, gvk := range stage.kinds {
			objs, err := r.ownedList(ctx, kc, gvk)
			if err != nil {
				return ctrl.Result{}, err
			}
			for i := range objs {
				o := &objs[i]
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
	return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, kc, Finalizer)
}
