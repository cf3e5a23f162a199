// Package webhook admits PersistentVolumeClaims of Flotilla's storage classes only when a
// qualifying set of nodes can hold them, so that a claim that cannot fit is refused at once, with
// the numbers, instead of sitting Pending.
package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/libs/apis/quantity"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

// Path is where the webhook is served.
const Path = "/validate-v1-persistentvolumeclaim"

// Name is the webhook's name in its ValidatingWebhookConfiguration; the storage-controller keeps
// its match condition naming Flotilla's storage classes (see MatchCondition).
const Name = "pvcs.storage.flotilla.dev"

// +kubebuilder:webhook:path=/validate-v1-persistentvolumeclaim,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=persistentvolumeclaims,verbs=create;update,versions=v1,name=pvcs.storage.flotilla.dev,admissionReviewVersions=v1,timeoutSeconds=5

// ClaimValidator admits claims of Flotilla's storage classes that fit.
type ClaimValidator struct {
	// Reader reads StorageClasses, StoragePolicies and PersistentVolumes (the manager's cache).
	Reader client.Reader
	// APIReader reads from the API server what Reader has not seen yet: a claim of a class made
	// moments ago must not pass unchecked as a claim of someone else's class.
	APIReader client.Reader
	// View is the polled copy of LINSTOR's capacity and volumes: no LINSTOR call per request.
	View *linstor.View
}

var _ admission.Validator[*corev1.PersistentVolumeClaim] = &ClaimValidator{}

// SetupWithManager registers the webhook.
func (v *ClaimValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &corev1.PersistentVolumeClaim{}).WithValidator(v).WithValidatorCustomPath(Path).Complete()
}

var sizePath = field.NewPath("spec", "resources", "requests", "storage")

// ValidateCreate implements admission.Validator.
func (v *ClaimValidator) ValidateCreate(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (admission.Warnings, error) {
	p, err := v.policyOf(ctx, pvc)
	if p == nil || err != nil {
		return nil, err
	}
	size, err := requestKiB(pvc)
	if err != nil {
		return nil, err
	}
	return nil, v.fits(ctx, pvc, p, size)
}

// ValidateUpdate implements admission.Validator: a resize must fit where the volume's replicas
// are (each grows in place); an unbound claim's new size must fit anywhere, as a new claim.
func (v *ClaimValidator) ValidateUpdate(ctx context.Context, old, pvc *corev1.PersistentVolumeClaim) (admission.Warnings, error) {
	// Capped, so that a claim admitted with a size beyond an int64 before it was refused can
	// still be updated in other ways.
	before := kib(quantity.Cap(*old.Spec.Resources.Requests.Storage()))
	if kib(quantity.Cap(*pvc.Spec.Resources.Requests.Storage())) <= before {
		return nil, nil
	}
	p, err := v.policyOf(ctx, pvc)
	if p == nil || err != nil {
		return nil, err
	}
	after, err := requestKiB(pvc)
	if err != nil {
		return nil, err
	}
	if pvc.Spec.VolumeName == "" {
		return nil, v.fits(ctx, pvc, p, after)
	}
	pv := &corev1.PersistentVolume{}
	if err := storage.Get(ctx, v.Reader, v.APIReader, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading PersistentVolume %s: %v", pvc.Spec.VolumeName, err))
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != storagepolicyv1.CSIDriver {
		return nil, nil
	}
	nodes, err := v.View.Nodes(ctx)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("LINSTOR's capacity is unknown (%v): claims of StorageClass %s cannot be checked", err, p.Name))
	}
	vol, ok := v.View.Volume(pv.Spec.CSI.VolumeHandle)
	if !ok {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("LINSTOR volume %s is not known yet: retry", pv.Spec.CSI.VolumeHandle))
	}
	if ok, msg := storage.GrowFits(nodes, vol, after-before); !ok {
		return nil, invalid(pvc, field.Invalid(sizePath, pvc.Spec.Resources.Requests.Storage().String(), "resize by "+storage.HumanKiB(after-before)+": "+msg))
	}
	return nil, nil
}

// ValidateDelete implements admission.Validator.
func (v *ClaimValidator) ValidateDelete(context.Context, *corev1.PersistentVolumeClaim) (admission.Warnings, error) {
	return nil, nil
}

// policyOf returns the policy of the claim's StorageClass, or nil for a class Flotilla did not
// make (the claim passes untouched).
func (v *ClaimValidator) policyOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*storagepolicyv1.StoragePolicy, error) {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil, nil
	}
	sc := &storagev1.StorageClass{}
	if err := storage.Get(ctx, v.Reader, v.APIReader, types.NamespacedName{Name: *pvc.Spec.StorageClassName}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading StorageClass %s: %v", *pvc.Spec.StorageClassName, err))
	}
	name := sc.Labels[storagepolicyv1.LabelPolicy]
	if name == "" || !storage.Owned(sc, name) {
		return nil, nil
	}
	p := &storagepolicyv1.StoragePolicy{}
	if err := storage.Get(ctx, v.Reader, v.APIReader, types.NamespacedName{Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, invalid(pvc, field.Invalid(field.NewPath("spec", "storageClassName"), sc.Name, "its StoragePolicy "+name+" is gone"))
		}
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading StoragePolicy %s: %v", name, err))
	}
	return p, nil
}

func (v *ClaimValidator) fits(ctx context.Context, pvc *corev1.PersistentVolumeClaim, p *storagepolicyv1.StoragePolicy, sizeKiB int64) error {
	nodes, err := v.View.Nodes(ctx)
	if err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("LINSTOR's capacity is unknown (%v): claims of StorageClass %s cannot be checked", err, p.Name))
	}
	pl := storage.PlacementOf(p)
	if ok, msg := storage.Compute(nodes, pl).Fits(pl, sizeKiB); !ok {
		return invalid(pvc, field.Invalid(sizePath, pvc.Spec.Resources.Requests.Storage().String(), msg))
	}
	return nil
}

func invalid(pvc *corev1.PersistentVolumeClaim, errs ...*field.Error) error {
	return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim").GroupKind(), pvc.Name, errs)
}

// requestKiB is the claim's storage request in KiB, or an error naming the field when the request
// is beyond an int64 of bytes: Value() of such a quantity answers 0 or wraps below zero, which
// would fit anywhere.
func requestKiB(pvc *corev1.PersistentVolumeClaim) (int64, error) {
	q := *pvc.Spec.Resources.Requests.Storage()
	if err := quantity.Validate(sizePath, q); err != nil {
		return 0, invalid(pvc, err)
	}
	return kib(q), nil
}

// kib is a size in KiB, rounded up as LINSTOR sizes volumes.
func kib(q resource.Quantity) int64 {
	b := q.Value()
	if b%1024 != 0 {
		return b/1024 + 1
	}
	return b / 1024
}
