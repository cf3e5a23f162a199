package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	corelisters "k8s.io/client-go/listers/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The write half of an app kind's storage: create, update and delete, each a write of the app's
// HelmRelease to kube-apiserver after the admission an app kind's schema and its definition ask
// for; the reply's resourceVersion is what the next read waits for (read-your-writes).

// errModified is kube-apiserver's own wording for an update on a stale object.
var errModified = errors.New("the object has been modified; please apply your changes to the latest version and try again")

// maxReleaseName is Helm's limit on release names.
const maxReleaseName = 53

// MaxSpecBytes bounds an app's spec, as JSON. The values travel into a HelmRelease, each of Helm's
// release records and the objects the chart renders, all bounded by etcd's 1.5 MiB per object; an
// app that could not be stored several times over is refused up front, naming spec.
const MaxSpecBytes = 256 << 10

// admit defaults and validates an app before it is written; old is the app before an update.
func (s *appStorage) admit(app, old *unstructured.Unstructured) error {
	var errs field.ErrorList
	if gvk := app.GroupVersionKind(); gvk != s.kind.GVK {
		if gvk.GroupVersion() != s.kind.GVK.GroupVersion() {
			errs = append(errs, field.Invalid(field.NewPath("apiVersion"), gvk.GroupVersion().String(), "must be "+s.kind.GVK.GroupVersion().String()))
		}
		if gvk.Kind != s.kind.GVK.Kind {
			errs = append(errs, field.Invalid(field.NewPath("kind"), gvk.Kind, "must be "+s.kind.GVK.Kind))
		}
	}
	name := app.GetName()
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, msg))
	}
	if release := s.kind.ReleasePrefix + name; len(release) > maxReleaseName {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), name, maxReleaseName-len(s.kind.ReleasePrefix)))
	} else if release == "default" && old == nil {
		// The app's identity is the delivery namespace's ServiceAccount named like its release:
		// that would be the namespace's own default one, which may change nothing.
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name,
			"this kind's release would be named default, the name of the namespace's default ServiceAccount, which cannot install an app: choose another name"))
	}
	for key := range app.GetLabels() {
		if strings.HasPrefix(key, catalogv1.AppsPrefix) {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "labels").Key(key), "keys under apps.flotilla.dev/ are the platform's"))
		}
	}
	for key := range app.GetAnnotations() {
		if strings.HasPrefix(key, catalogv1.AppsPrefix) {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(key), "keys under apps.flotilla.dev/ are the platform's"))
		}
	}
	if len(app.GetFinalizers()) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "finalizers"), "apps do not support finalizers"))
	}
	if raw, err := json.Marshal(app.Object["spec"]); err == nil && len(raw) > MaxSpecBytes {
		errs = append(errs, field.TooLong(field.NewPath("spec"), "", MaxSpecBytes))
	}
	if len(errs) == 0 {
		if app.Object["spec"] == nil {
			app.Object["spec"] = map[string]any{} // so that the schema's defaults apply
		}
		s.kind.Default(app.Object)
		var oldContent map[string]any
		if old != nil {
			oldContent = old.Object
		}
		errs = s.kind.Validate(app.Object, oldContent)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(s.kind.GVK.GroupKind(), name, errs)
	}
	return nil
}

// namespaceReader reads namespaces from the admission chain's informer (NamespaceLifecycle's) and,
// for one it has not seen yet (just created), from kube-apiserver, as NamespaceLifecycle does.
// What it returns is shared: never modified.
type namespaceReader struct {
	lister corelisters.NamespaceLister
	client client.Client
}

func (r namespaceReader) get(ctx context.Context, name string) (*corev1.Namespace, error) {
	if r.lister != nil {
		if ns, err := r.lister.Get(name); err == nil {
			return ns, nil
		}
	}
	ns := &corev1.Namespace{}
	return ns, r.client.Get(ctx, client.ObjectKey{Name: name}, ns)
}

// namespace reads the tenant namespace an app is ordered in, and checks that its delivery
// namespace is in place: an app is only ever installed as its own identity there.
func (s *appStorage) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := s.namespaces.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if ns.DeletionTimestamp != nil {
		return nil, apierrors.NewForbidden(s.gr(), "", fmt.Errorf("namespace %s is being deleted", name))
	}
	delivery := tenancyv1.DeliveryNamespace(name)
	if delivery == "" || ns.Labels[tenancyv1.LabelTenant] == "" {
		return nil, apierrors.NewForbidden(s.gr(), "", fmt.Errorf("namespace %s is not a tenant's: apps are ordered in a tenant's namespace", name))
	}
	d, err := s.namespaces.get(ctx, delivery)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err != nil || d.Labels[tenancyv1.LabelDeliveryFor] != name || d.DeletionTimestamp != nil {
		return nil, apierrors.NewForbidden(s.gr(), "", fmt.Errorf("tenant namespace %s has no delivery namespace %s (yet): the tenant-controller makes it", name, delivery))
	}
	return ns, nil
}

// Create implements rest.Creater: the app becomes a new HelmRelease.
func (s *appStorage) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	app, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not an app: %T", obj))
	}
	if s.kind.Definition.DeletionTimestamp != nil { // every create comes here: POST, PUT and apply
		return nil, apierrors.NewForbidden(s.gr(), app.GetName(), fmt.Errorf("the %s definition is being deleted: no new apps of this kind may be created", s.kind.GVK.Kind))
	}
	app.SetNamespace(genericapirequest.NamespaceValue(ctx))
	if err := s.admit(app, nil); err != nil {
		return nil, err
	}
	if createValidation != nil {
		if err := createValidation(ctx, app); err != nil {
			return nil, err
		}
	}
	ns, err := s.namespace(ctx, app.GetNamespace())
	if err != nil {
		return nil, err
	}
	hr := &helmv2.HelmRelease{}
	if err := toHelmRelease(s.kind, app, ns, s.registry, hr); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := s.client.Create(ctx, hr, &client.CreateOptions{DryRun: opts.DryRun}); err != nil {
		return nil, s.mapError(err, app.GetName())
	}
	s.wrote(hr, opts.DryRun)
	return toApp(s.kind, hr)
}

// wrote records a write's resourceVersion, which the next read waits for (store.caughtUp). A dry
// run changes nothing.
func (s *appStorage) wrote(hr *helmv2.HelmRelease, dryRun []string) {
	if len(dryRun) == 0 {
		s.store.saw(parseRV(hr.ResourceVersion))
	}
}

// read returns an app's HelmRelease as kube-apiserver has it now (writes depend on it, so not
// from the cache, which only finds it) and the app it holds.
func (s *appStorage) read(ctx context.Context, name string) (*helmv2.HelmRelease, *unstructured.Unstructured, error) {
	s.store.caughtUp(ctx)
	current := s.store.get(s.kind.GVK.Kind, genericapirequest.NamespaceValue(ctx), name)
	if current == nil {
		return nil, nil, apierrors.NewNotFound(s.gr(), name)
	}
	hr := &helmv2.HelmRelease{}
	if err := s.client.Get(ctx, client.ObjectKeyFromObject(current), hr); err != nil {
		return nil, nil, s.mapError(err, name)
	}
	s.store.saw(parseRV(hr.ResourceVersion)) // after a conflict, the client's next read shows it
	app, err := toApp(s.kind, hr)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	return hr, app, nil
}

// keepDeletionProtection carries an app's deletion protection over an update that does not
// mention it (a replace whose body omits the field, or the whole spec): only an explicit false
// turns it off.
func keepDeletionProtection(app, old *unstructured.Unstructured) {
	if on, _, _ := unstructured.NestedBool(old.Object, "spec", catalog.DeletionProtectionField); !on {
		return
	}
	switch spec := app.Object["spec"].(type) {
	case map[string]any:
		if _, set := spec[catalog.DeletionProtectionField]; !set {
			spec[catalog.DeletionProtectionField] = true
		}
	case nil: // no spec, or spec: null
		app.Object["spec"] = map[string]any{catalog.DeletionProtectionField: true}
	} // anything else is refused by admission
}

// Update implements rest.Updater (PUT, PATCH and server-side apply).
func (s *appStorage) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	namespace := genericapirequest.NamespaceValue(ctx)
	for attempt := 0; ; attempt++ {
		hr, old, err := s.read(ctx, name)
		if apierrors.IsNotFound(err) && forceAllowCreate {
			obj, err := objInfo.UpdatedObject(ctx, nil)
			if err != nil {
				return nil, false, err
			}
			created, err := s.Create(ctx, obj, createValidation, &metav1.CreateOptions{DryRun: opts.DryRun, FieldManager: opts.FieldManager})
			return created, err == nil, err
		}
		if err != nil {
			return nil, false, err
		}
		obj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil {
			return nil, false, err
		}
		app, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, false, apierrors.NewBadRequest(fmt.Sprintf("not an app: %T", obj))
		}
		if rv := app.GetResourceVersion(); rv != "" && rv != hr.ResourceVersion {
			return nil, false, apierrors.NewConflict(s.gr(), name, errModified)
		}
		if app.GetUID() != "" && app.GetUID() != hr.UID {
			return nil, false, apierrors.NewConflict(s.gr(), name, fmt.Errorf("metadata.uid %s does not match the app's %s", app.GetUID(), hr.UID))
		}
		keepDeletionProtection(app, old)
		if err := s.admit(app, old); err != nil {
			return nil, false, err
		}
		if updateValidation != nil {
			if err := updateValidation(ctx, app, old); err != nil {
				return nil, false, err
			}
		}
		ns, err := s.namespace(ctx, namespace)
		if err != nil {
			return nil, false, err
		}
		before := hr.DeepCopy()
		if err := toHelmRelease(s.kind, app, ns, s.registry, hr); err != nil {
			return nil, false, apierrors.NewInternalError(err)
		}
		if equality.Semantic.DeepEqual(before, hr) { // nothing to write: a repeated apply, say
			return old, false, nil
		}
		// A conflict here is a write that came between our read and our update (often
		// helm-controller's status): read again. A resourceVersion the client pinned is checked
		// against the fresh read above, as etcd-backed storage does.
		err = s.client.Update(ctx, hr, &client.UpdateOptions{DryRun: opts.DryRun})
		if apierrors.IsConflict(err) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, false, s.mapError(err, name)
		}
		s.wrote(hr, opts.DryRun)
		updated, err := toApp(s.kind, hr)
		return updated, false, err
	}
}

// Delete implements rest.GracefulDeleter. An app with spec.deletionProtection is refused; the
// app's PersistentVolumeClaims are kept (Retain) or deleted (Delete) as its volume policy says.
func (s *appStorage) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	hr, app, err := s.read(ctx, name)
	if err != nil {
		return nil, false, err
	}
	if hr.Labels[catalogv1.LabelDeletionProtection] == "true" {
		return nil, false, apierrors.NewForbidden(s.gr(), name,
			fmt.Errorf("spec.deletionProtection is true: set it to false before deleting the app"))
	}
	if deleteValidation != nil {
		if err := deleteValidation(ctx, app); err != nil {
			return nil, false, err
		}
	}
	if opts.Preconditions != nil {
		if uid := opts.Preconditions.UID; uid != nil && *uid != hr.UID {
			return nil, false, apierrors.NewConflict(s.gr(), name, fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *uid, hr.UID))
		}
		if rv := opts.Preconditions.ResourceVersion; rv != nil && *rv != hr.ResourceVersion {
			return nil, false, apierrors.NewConflict(s.gr(), name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *rv, hr.ResourceVersion))
		}
	}
	dry := len(opts.DryRun) > 0
	policy := catalogv1.VolumePolicy(hr.Annotations[catalogv1.AnnotationVolumePolicy])
	if policy == "" {
		policy = s.kind.DefaultVolumePolicy()
	}
	if policy == catalogv1.VolumePolicyRetain && !dry {
		// Before the release is uninstalled, so that garbage collection cannot take them.
		if err := s.retainVolumes(ctx, hr, app); err != nil {
			return nil, false, apierrors.NewInternalError(fmt.Errorf("keeping the app's volumes: %w", err))
		}
	}
	// helm-controller writes the HelmRelease's status all the time: only a resourceVersion the
	// client asked for is a precondition.
	del := &client.DeleteOptions{DryRun: opts.DryRun, Preconditions: &metav1.Preconditions{UID: &hr.UID}}
	if opts.Preconditions != nil {
		del.Preconditions.ResourceVersion = opts.Preconditions.ResourceVersion
	}
	if err := s.client.Delete(ctx, hr, del); err != nil {
		return nil, false, s.mapError(err, name)
	}
	if dry {
		return app, false, nil
	}
	if policy == catalogv1.VolumePolicyDelete {
		if err := s.client.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(catalog.AppNamespace(hr)),
			client.MatchingLabels{catalog.ReleaseLabel: hr.Spec.ReleaseName}); err != nil {
			return nil, false, apierrors.NewInternalError(fmt.Errorf("deleting the app's volumes: %w", err))
		}
	}
	// The HelmRelease may linger while helm-controller uninstalls it.
	gone := &helmv2.HelmRelease{}
	if err := s.client.Get(ctx, client.ObjectKeyFromObject(hr), gone); apierrors.IsNotFound(err) {
		return app, true, nil
	} else if err != nil {
		return nil, false, s.mapError(err, name)
	}
	s.wrote(gone, nil)
	deleting, err := toApp(s.kind, gone)
	return deleting, false, err
}

// DeleteCollection implements rest.CollectionDeleter: every app the selectors match is deleted as
// a DELETE of it would be (its volume policy applies). Apps with deletion protection are kept:
// the others are deleted, then a 403 names the ones kept.
func (s *appStorage) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions,
	listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	keep, err := s.filter(listOptions)
	if err != nil {
		return nil, err
	}
	s.store.caughtUp(ctx)
	hrs, _, err := s.store.list(s.kind.GVK.Kind, genericapirequest.NamespaceValue(ctx), 0, keep)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(hrs, byKey)
	deleted := s.NewList().(*unstructured.UnstructuredList)
	var kept []string
	for _, hr := range hrs {
		name := hr.Labels[catalogv1.LabelAppName]
		obj, _, err := s.Delete(genericapirequest.WithNamespace(ctx, catalog.AppNamespace(hr)), name, deleteValidation, opts.DeepCopy())
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err) && hr.Labels[catalogv1.LabelDeletionProtection] == "true":
			kept = append(kept, catalog.AppNamespace(hr)+"/"+name)
		case err != nil:
			return nil, err
		default:
			deleted.Items = append(deleted.Items, *obj.(*unstructured.Unstructured))
		}
	}
	if len(kept) > 0 {
		return nil, apierrors.NewForbidden(s.gr(), "", fmt.Errorf("spec.deletionProtection is true for %s: set it to false before deleting them (the other apps were deleted)", strings.Join(kept, ", ")))
	}
	return deleted, nil
}

// retainVolumes detaches the app's claims from their owners and labels them with the app. A claim
// labelled with volume policy Delete (a worker's root disk) is left to go with its owner.
func (s *appStorage) retainVolumes(ctx context.Context, hr *helmv2.HelmRelease, app *unstructured.Unstructured) error {
	var pvcs corev1.PersistentVolumeClaimList
	if err := s.client.List(ctx, &pvcs, client.InNamespace(catalog.AppNamespace(hr)), client.MatchingLabels{catalog.ReleaseLabel: hr.Spec.ReleaseName}); err != nil {
		return err
	}
	from := strings.ToLower(s.kind.GVK.Kind) + "." + app.GetName()
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Labels[catalogv1.LabelVolumePolicy] == string(catalogv1.VolumePolicyDelete) ||
			pvc.Labels[catalogv1.LabelRetainedFrom] == from && len(pvc.OwnerReferences) == 0 {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Labels == nil {
			pvc.Labels = map[string]string{}
		}
		pvc.Labels[catalogv1.LabelRetainedFrom] = from
		pvc.OwnerReferences = nil
		if err := s.client.Patch(ctx, pvc, patch); err != nil {
			return err
		}
	}
	return nil
}

// mapError reports a HelmRelease error as an error about the app.
func (s *appStorage) mapError(err error, name string) error {
	switch {
	case apierrors.IsNotFound(err):
		if status, ok := err.(apierrors.APIStatus); ok && status.Status().Details != nil && status.Status().Details.Kind == "namespaces" {
			return err // the app's namespace does not exist
		}
		return apierrors.NewNotFound(s.gr(), name)
	case apierrors.IsAlreadyExists(err):
		return apierrors.NewAlreadyExists(s.gr(), name)
	case apierrors.IsConflict(err):
		return apierrors.NewConflict(s.gr(), name, errModified)
	case apierrors.IsInvalid(err):
		return apierrors.NewInternalError(fmt.Errorf("the app's HelmRelease was rejected: %w", err))
	}
	return err
}
