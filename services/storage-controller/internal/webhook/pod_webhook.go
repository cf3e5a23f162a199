package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

// PodPath is where the pod webhook is served.
const PodPath = "/mutate-v1-pod"

// Only pods with a scheduling class reach the webhook, through two entries of its configuration
// (a webhook's match conditions cannot read the namespace): NamespacedPods for namespaces
// labelled with a class (namespaceSelector: the label exists), AnnotatedPods for pods naming one
// in other namespaces (namespaceSelector: the label does not exist; PodMatchCondition). The chart
// and the tests configure them so.
const (
	NamespacedPods    = "pods.storage.flotilla.dev"
	AnnotatedPods     = "annotated-pods.storage.flotilla.dev"
	PodMatchCondition = `has(object.metadata.annotations) && 'storage.flotilla.dev/scheduling-class' in object.metadata.annotations`
)

// +kubebuilder:webhook:path=/mutate-v1-pod,mutating=true,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=pods.storage.flotilla.dev,admissionReviewVersions=v1,timeoutSeconds=5,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/mutate-v1-pod,mutating=true,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=annotated-pods.storage.flotilla.dev,admissionReviewVersions=v1,timeoutSeconds=5,reinvocationPolicy=IfNeeded

// PodPlacer writes a pod's scheduling class into it at creation.
type PodPlacer struct {
	// Reader reads namespaces and SchedulingClasses (the manager's cache).
	Reader client.Reader
	// APIReader reads from the API server what Reader has not seen yet.
	APIReader client.Reader
}

var _ admission.Defaulter[*corev1.Pod] = &PodPlacer{}

// SetupWithManager registers the webhook.
func (p *PodPlacer) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &corev1.Pod{}).WithDefaulter(p).WithDefaulterCustomPath(PodPath).Complete()
}

// Default implements admission.Defaulter.
func (p *PodPlacer) Default(ctx context.Context, pod *corev1.Pod) error {
	if pod.Namespace == "" {
		if req, err := admission.RequestFromContext(ctx); err == nil {
			pod.Namespace = req.Namespace
		}
	}
	ns := &corev1.Namespace{}
	if err := storage.Get(ctx, p.Reader, p.APIReader, types.NamespacedName{Name: pod.Namespace}, ns); err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("reading namespace %s: %v", pod.Namespace, err))
	}
	name := storage.ClassOf(pod, ns)
	if name == "" {
		return nil
	}
	class := &storagepolicyv1.SchedulingClass{}
	if err := storage.Get(ctx, p.Reader, p.APIReader, types.NamespacedName{Name: name}, class); err != nil {
		if apierrors.IsNotFound(err) {
			storage.Hold(pod, name)
			return nil
		}
		return apierrors.NewServiceUnavailable(fmt.Sprintf("reading SchedulingClass %s: %v", name, err))
	}
	// Place is idempotent (a reinvocation, or a pod that already carries the class's constraints,
	// gets nothing twice) and trusts nothing the pod says about itself.
	if err := storage.Place(pod, class); err != nil {
		return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Pod").GroupKind(), pod.Name, field.ErrorList{err.(*field.Error)})
	}
	return nil
}
