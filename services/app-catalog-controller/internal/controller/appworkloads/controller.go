// Package appworkloads writes on each app's HelmRelease why the app's pods cannot start (the
// scheduler found no node, an image cannot be pulled, a container keeps crashing) or cannot even
// be created (a quota or LimitRange refuses them), or nothing once they can: the apps API then
// shows the app not Ready with that message, although its Helm release is installed. For an app
// whose definition asks for readiness, it also says what is not ready yet once the release is
// installed, until all of it is (the apps API marks each new generation so). An app's pods are
// those of its namespace labelled app.kubernetes.io/instance with its release's name (Helm's
// convention, which the catalog's charts follow), and its StatefulSets and Deployments, and the
// objects its definition's health checks judge, so labelled too.
package appworkloads

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/workloads"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// Recheck is how soon an app whose StatefulSet has fewer pods than it wants, for no reason known
// yet, is looked at again: the StatefulSet controller reports a refused pod only in an Event.
const Recheck = 15 * time.Second

// StartingRecheck is how often a starting app is looked at again: the objects its health checks
// judge are read when it is, not watched.
const StartingRecheck = 5 * time.Second

// Reconciler keeps catalogv1.AnnotationWorkloads of each app's HelmRelease.
type Reconciler struct {
	Client client.Client
	// APIReader reads Events, which are not cached.
	APIReader client.Reader

	// compiled holds each definition's health checks, compiled for one generation of it
	// (name → compiledChecks): a starting app is judged every StartingRecheck.
	compiled sync.Map
}

type compiledChecks struct {
	generation int64
	checks     *workloads.Checks
	err        error
}

// checks returns def's health checks, compiled once per generation of def.
func (r *Reconciler) checks(def *catalogv1.ApplicationDefinition) (*workloads.Checks, error) {
	if c, ok := r.compiled.Load(def.Name); ok && c.(compiledChecks).generation == def.Generation {
		return c.(compiledChecks).checks, c.(compiledChecks).err
	}
	checks, err := workloads.Compile(def.Spec.Readiness.HealthChecks)
	r.compiled.Store(def.Name, compiledChecks{def.Generation, checks, err})
	return checks, err
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=list
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=applicationdefinitions,verbs=get;list;watch

// Reconcile writes why the app's pods cannot start (or cannot even be created), or removes it
// once they can; and, for a starting app whose release is installed, what is not ready yet, or
// removes that once all of it is. A converged app writes nothing.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	hr := &helmv2.HelmRelease{}
	if err := r.Client.Get(ctx, req.NamespacedName, hr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if hr.Labels[catalogv1.LabelDefinition] == "" || hr.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	ns, release := client.InNamespace(catalog.AppNamespace(hr)), client.MatchingLabels{catalog.ReleaseLabel: hr.Spec.ReleaseName}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, ns, release); err != nil {
		return reconcile.Result{}, err
	}
	sets, deployments := &appsv1.StatefulSetList{}, &appsv1.DeploymentList{}
	if err := r.Client.List(ctx, sets, ns, release); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Client.List(ctx, deployments, ns, release); err != nil {
		return reconcile.Result{}, err
	}
	why := workloads.Explain(pods.Items)
	var res reconcile.Result
	if why == "" {
		var err error
		if why, res, err = r.uncreated(ctx, sets.Items, deployments.Items); err != nil {
			return reconcile.Result{}, err
		}
	}
	starting := hr.Annotations[catalogv1.AnnotationStarting]
	if why == "" && starting != "" && installed(hr) {
		var err error
		if starting, err = r.starting(ctx, hr, sets.Items, deployments.Items); err != nil {
			return reconcile.Result{}, err
		}
		if starting != "" {
			res.RequeueAfter = StartingRecheck
		}
	}
	if hr.Annotations[catalogv1.AnnotationWorkloads] == why && hr.Annotations[catalogv1.AnnotationStarting] == starting {
		return res, nil
	}
	// At the resourceVersion read: the apps API may have written a new generation since, which
	// starts anew, and what was judged here is about the last one.
	patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	setOrDelete(hr, catalogv1.AnnotationWorkloads, why)
	setOrDelete(hr, catalogv1.AnnotationStarting, starting)
	if err := r.Client.Patch(ctx, hr, patch); apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // read it again
	} else if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return res, nil
}

func setOrDelete(hr *helmv2.HelmRelease, key, value string) {
	if value == "" {
		delete(hr.Annotations, key)
		return
	}
	if hr.Annotations == nil {
		hr.Annotations = map[string]string{}
	}
	hr.Annotations[key] = value
}

// installed reports whether helm-controller has installed the app's release at the HelmRelease's
// generation: before, its objects may be those of the last generation, or none.
func installed(hr *helmv2.HelmRelease) bool {
	return hr.Status.ObservedGeneration == hr.Generation && apimeta.IsStatusConditionTrue(hr.Status.Conditions, fluxmeta.ReadyCondition)
}

// starting says what of a starting app (its release installed) is not ready yet, or "" once all
// of it is: its StatefulSets and Deployments (kstatus: every replica ready and up to date) and
// the objects its definition's health checks judge. Not its pods one by one: their workloads (or
// an operator's resource) count them, and a pod merely labelled as the app's is not the app.
func (r *Reconciler) starting(ctx context.Context, hr *helmv2.HelmRelease, sets []appsv1.StatefulSet, deployments []appsv1.Deployment) (string, error) {
	def := &catalogv1.ApplicationDefinition{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: hr.Labels[catalogv1.LabelDefinition]}, def); err != nil {
		return "", client.IgnoreNotFound(err) // no definition: nothing says what to wait for
	}
	checks, err := r.checks(def)
	if err != nil {
		return "its definition's readiness cannot be judged: " + err.Error(), nil
	}
	var objs []*unstructured.Unstructured
	add := func(gvk schema.GroupVersionKind, o any) error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(gvk)
		objs = append(objs, u)
		return nil
	}
	for i := range sets {
		if err := add(appsv1.SchemeGroupVersion.WithKind("StatefulSet"), &sets[i]); err != nil {
			return "", err
		}
	}
	for i := range deployments {
		if err := add(appsv1.SchemeGroupVersion.WithKind("Deployment"), &deployments[i]); err != nil {
			return "", err
		}
	}
	ns, release := client.InNamespace(catalog.AppNamespace(hr)), client.MatchingLabels{catalog.ReleaseLabel: hr.Spec.ReleaseName}
	for _, gvk := range checks.Kinds() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.APIReader.List(ctx, list, ns, release); err != nil {
			// Not allowed to read the kind (the catalog's readiness role lacks it), or the kind
			// is not served: the app says so, and is looked at again.
			return fmt.Sprintf("its %s cannot be read to judge its readiness: %v", gvk.Kind, err), nil
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	if msg := workloads.NotReady(objs, checks); msg != "" {
		return "waiting for " + msg, nil
	}
	return "", nil
}

// uncreated says why the release's workloads cannot create their pods (a quota, a LimitRange or a
// policy refusing them): a Deployment's ReplicaFailure condition, a StatefulSet's latest
// FailedCreate Event. A StatefulSet short of pods with no such Event yet is looked at again.
func (r *Reconciler) uncreated(ctx context.Context, sets []appsv1.StatefulSet, deployments []appsv1.Deployment) (string, reconcile.Result, error) {
	var res reconcile.Result
	var whys []string
	for _, d := range deployments {
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
				whys = append(whys, fmt.Sprintf("Deployment %s cannot create its pods: %s", d.Name, c.Message))
			}
		}
	}
	for _, s := range sets {
		if s.Spec.Replicas == nil || s.Status.Replicas >= *s.Spec.Replicas {
			continue
		}
		events := &eventsv1.EventList{}
		if err := r.APIReader.List(ctx, events, client.InNamespace(s.Namespace), client.MatchingFields{
			"regarding.kind": "StatefulSet", "regarding.name": s.Name, "reason": "FailedCreate"}); err != nil {
			return "", res, err
		}
		if latest := workloads.Latest(events.Items); latest != nil {
			whys = append(whys, fmt.Sprintf("StatefulSet %s cannot create its pods: %s", s.Name, latest.Note))
			continue
		}
		res.RequeueAfter = Recheck
	}
	slices.Sort(whys)
	return strings.Join(whys, "; "), res, nil
}

// SetupWithManager watches apps' HelmReleases (new ones, new generations, and releases newly
// installed) and the pods and workloads of releases.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toApp := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		release := o.GetLabels()[catalog.ReleaseLabel]
		if release == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: tenancyv1.DeliveryNamespace(o.GetNamespace()), Name: release}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("appworkloads").
		For(&helmv2.HelmRelease{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, newlyInstalled))).
		Watches(&corev1.Pod{}, toApp).
		Watches(&appsv1.StatefulSet{}, toApp).
		Watches(&appsv1.Deployment{}, toApp).
		Complete(r)
}

// newlyInstalled passes a HelmRelease whose release helm-controller has just installed: a
// starting app's objects can be judged from then on.
var newlyInstalled = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*helmv2.HelmRelease)
	hr, ok := e.ObjectNew.(*helmv2.HelmRelease)
	return okOld && ok && installed(hr) && !installed(old)
}}

// CacheByObject keeps in the manager's cache only the pods, StatefulSets and Deployments of Helm
// releases, and of them only what the reconciler reads: their status, their replicas, and their
// containers' names and images.
func CacheByObject() map[client.Object]cache.ByObject {
	req, _ := labels.NewRequirement(catalog.ReleaseLabel, selection.Exists, nil)
	releases := labels.NewSelector().Add(*req)
	trim := func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			o.ManagedFields = nil
			o.Spec = corev1.PodSpec{InitContainers: images(o.Spec.InitContainers), Containers: images(o.Spec.Containers)}
		case *appsv1.StatefulSet:
			o.ManagedFields, o.Spec = nil, appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas, UpdateStrategy: o.Spec.UpdateStrategy}
		case *appsv1.Deployment:
			o.ManagedFields, o.Spec = nil, appsv1.DeploymentSpec{Replicas: o.Spec.Replicas}
		}
		return obj, nil
	}
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:         {Label: releases, Transform: trim},
		&appsv1.StatefulSet{}: {Label: releases, Transform: trim},
		&appsv1.Deployment{}:  {Label: releases, Transform: trim},
	}
}

func images(cs []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, 0, len(cs))
	for _, c := range cs {
		out = append(out, corev1.Container{Name: c.Name, Image: c.Image})
	}
	return out
}
