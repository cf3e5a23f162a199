// Package schedulingclass reports SchedulingClasses Ready, and tells the owners of pods held for a
// class that does not exist why their pods do not run. (The classes themselves are written into
// pods at admission: internal/webhook.PodPlacer.)
package schedulingclass

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=schedulingclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.flotilla.dev,resources=schedulingclasses/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=pods;namespaces,verbs=get;list;watch

// Reconciler marks SchedulingClasses Ready: the API server has checked them, and the pod webhook
// applies them as they are.
type Reconciler struct {
	client.Client
}

// Reconcile writes the class's status once, when it is not yet Ready for its generation.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &storagepolicyv1.SchedulingClass{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper := patch.NewHelper(c)
	conditions.Summarize(c, nil, nil)
	conditions.MarkTrue(c, fmeta.ReadyCondition, fmeta.SucceededReason, "Written into pods at admission")
	_, err := helper.Status(ctx, r.Client, c)
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// SetupWithManager watches SchedulingClasses.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&storagepolicyv1.SchedulingClass{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("schedulingclass").
		Complete(r)
}

// HeldPods posts an event on each pod held for a class that does not exist, naming the class.
type HeldPods struct {
	client.Client
	Recorder recorder.EventRecorder
}

// Reconcile posts the event while the pod is held.
func (h *HeldPods) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := h.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	name := pod.Labels[storagepolicyv1.LabelMissingClass]
	if name == "" || !held(pod) {
		return ctrl.Result{}, nil
	}
	err := h.Get(ctx, client.ObjectKey{Name: name}, &storagepolicyv1.SchedulingClass{})
	switch {
	case err == nil:
		h.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "SchedulingClassCreatedLate", "Hold",
			"SchedulingClass %s exists now, but was missing when the pod was created: delete the pod so that it is made again with the class", name)
	case client.IgnoreNotFound(err) == nil:
		h.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "SchedulingClassNotFound", "Hold",
			"SchedulingClass %s does not exist: the pod is held by scheduling gate %s and runs nowhere until it is made again with an existing class", name, storagepolicyv1.SchedulingGate)
	default:
		return ctrl.Result{}, errors.Join(fmt.Errorf("reading SchedulingClass %s", name), err)
	}
	return ctrl.Result{}, nil
}

func held(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == storagepolicyv1.SchedulingGate {
			return true
		}
	}
	return false
}

// SetupWithManager watches the held pods only (see CacheByObject).
func (h *HeldPods) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[storagepolicyv1.LabelMissingClass] != ""
		}))).
		Named("heldpods").
		Complete(h)
}

// PodCache limits the manager's cache of pods to the held ones: the controller never keeps every
// pod of the cluster in memory.
func PodCache() cache.ByObject {
	req, _ := labels.NewRequirement(storagepolicyv1.LabelMissingClass, selection.Exists, nil)
	return cache.ByObject{Label: labels.NewSelector().Add(*req)}
}
