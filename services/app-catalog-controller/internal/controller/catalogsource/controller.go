// Package catalogsource reconciles CatalogSources: it reads the ApplicationDefinitions in a Flux
// source's artifact (files in a tarball, or annotations of the charts in a Helm repository's
// index) and applies them, labelled with the source. A definition whose name or kind
// another source or a hand-written definition already has is reported as a conflict and left
// alone; definitions the source no longer holds are deleted (only those it created).
package catalogsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Finalizer removes the definitions a source created when the source is deleted.
const Finalizer = "catalog.flotilla.dev/definitions"

// sourceAPIVersion is the Flux source API the referenced sources are read in.
const sourceAPIVersion = "source.toolkit.fluxcd.io/v1"

const helmRepository = "HelmRepository"

// Interval is how often a CatalogSource is applied again when nothing else triggers it, so that
// anything the watches miss is corrected.
const Interval = 10 * time.Minute

// Reconciler reconciles CatalogSources.
type Reconciler struct {
	Client  client.Client
	Fetcher *Fetcher
}

// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=catalogsources,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=catalogsources/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=catalog.flotilla.dev,resources=applicationdefinitions,verbs=create;update;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;buckets;helmrepositories,verbs=get;list;watch

// Reconcile applies one source's definitions and writes its status once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	src := &catalogv1.CatalogSource{}
	if err := r.Client.Get(ctx, req.NamespacedName, src); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	h := patch.NewHelper(src)
	defer func() { status.Write(ctx, r.Client, h, src, &res, &retErr) }()
	if src.DeletionTimestamp != nil {
		return reconcile.Result{}, r.reconcileDelete(ctx, src)
	}
	if !controllerutil.ContainsFinalizer(src, Finalizer) {
		if err := patch.AddFinalizer(ctx, r.Client, src, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.reconcileNormal(ctx, src)
}

// reconcileNormal applies the definitions of the source's current artifact. An artifact a human
// must fix (an OCI Helm repository, content that is not definitions) is Stalled with a terminal
// error (status.Stalled): a new revision of the source brings it back. Definitions in conflict
// with others are Stalled too, and the source is still applied on its interval. Anything else
// that fails (the source unreachable, an API error) is Reconciling and retried.
func (r *Reconciler) reconcileNormal(ctx context.Context, src *catalogv1.CatalogSource) (reconcile.Result, error) {
	artifact, ready, err := r.artifact(ctx, src)
	if errors.Is(err, errNoIndex) {
		return status.Stalled(src, conditions.Stall{Reason: fmeta.InvalidSpecReason, Message: err.Error()}, reconcile.Result{})
	}
	if err != nil {
		return reconcile.Result{}, reconciling(src, fmeta.ProgressingReason, err)
	}
	if artifact == nil {
		conditions.MarkFalse(src, fmeta.ReadyCondition, catalogv1.SourceNotReadyReason, ready)
		conditions.MarkTrue(src, fmeta.ReconcilingCondition, catalogv1.SourceNotReadyReason, ready)
		return reconcile.Result{}, nil // the source's own changes requeue us
	}
	defs, err := r.definitions(ctx, src, artifact)
	if invalid := (invalidArtifact{}); errors.As(err, &invalid) {
		return status.Stalled(src, conditions.Stall{Reason: catalogv1.ArtifactFailedReason, Message: err.Error()}, reconcile.Result{})
	}
	if err != nil {
		return reconcile.Result{}, reconciling(src, catalogv1.ArtifactFailedReason, err)
	}
	applied, conflicts, err := r.apply(ctx, src, defs)
	if err != nil {
		return reconcile.Result{}, reconciling(src, fmeta.ProgressingReason, err)
	}
	src.Status.Revision, src.Status.Definitions, src.Status.Conflicts = artifact.revision, applied, conflicts
	if len(conflicts) > 0 { // the definitions' watch brings the source back when a conflict goes away
		return status.Stalled(src, conditions.Stall{Reason: catalogv1.KindConflictReason,
			Message: fmt.Sprintf("%d definitions not applied: %s", len(conflicts), strings.Join(conflicts, "; "))},
			reconcile.Result{RequeueAfter: Interval}) // the rest is still applied on the interval
	}
	conditions.Summarize(src, nil, nil)
	conditions.MarkTrue(src, fmeta.ReadyCondition, fmeta.SucceededReason,
		fmt.Sprintf("applied %d definitions from revision %s", len(applied), artifact.revision))
	return reconcile.Result{RequeueAfter: Interval}, nil
}

// reconciling reports a failure that a retry may cure: Ready=False and Reconciling=True with the
// error (never Stalled), and returns the error for controller-runtime's backoff.
func reconciling(src *catalogv1.CatalogSource, reason string, err error) error {
	conditions.Delete(src, fmeta.StalledCondition)
	conditions.MarkFalse(src, fmeta.ReadyCondition, reason, err.Error())
	conditions.MarkTrue(src, fmeta.ReconcilingCondition, reason, err.Error())
	return err
}

type artifact struct{ url, revision, digest string }

// errNoIndex: an OCI HelmRepository has no index, so no chart annotations to read.
var errNoIndex = errors.New("an OCI Helm repository has no index: publish the definitions in an OCIRepository")

// definitions reads the definitions a source's artifact holds: its charts' annotations for a
// HelmRepository (an index), files under spec.path for the others (a tarball).
func (r *Reconciler) definitions(ctx context.Context, src *catalogv1.CatalogSource, a *artifact) ([]*catalogv1.ApplicationDefinition, error) {
	if ref := src.Spec.SourceRef; ref.Kind == helmRepository {
		return r.Fetcher.ChartDefinitions(ctx, a.url, a.digest, ref)
	}
	return r.Fetcher.Definitions(ctx, a.url, a.digest, src.Spec.Path)
}

// artifact reads the Flux source's artifact; nil with a reason while it has none ready.
func (r *Reconciler) artifact(ctx context.Context, src *catalogv1.CatalogSource) (*artifact, string, error) {
	ref := src.Spec.SourceRef
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(sourceAPIVersion)
	u.SetKind(ref.Kind)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Sprintf("%s %s/%s not found", ref.Kind, ref.Namespace, ref.Name), nil
		}
		return nil, "", err
	}
	url, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
	revision, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
	digest, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "digest")
	if typ, _, _ := unstructured.NestedString(u.Object, "spec", "type"); ref.Kind == helmRepository && typ == "oci" {
		return nil, "", fmt.Errorf("%s %s/%s: %w", ref.Kind, ref.Namespace, ref.Name, errNoIndex)
	}
	if url == "" {
		return nil, fmt.Sprintf("%s %s/%s has no artifact yet", ref.Kind, ref.Namespace, ref.Name), nil
	}
	return &artifact{url: url, revision: revision, digest: digest}, "", nil
}

// apply creates or updates the source's definitions and deletes the ones it no longer holds.
func (r *Reconciler) apply(ctx context.Context, src *catalogv1.CatalogSource, defs []*catalogv1.ApplicationDefinition) ([]string, []string, error) {
	var existing catalogv1.ApplicationDefinitionList
	if err := r.Client.List(ctx, &existing); err != nil {
		return nil, nil, err
	}
	byName := map[string]*catalogv1.ApplicationDefinition{}
	kindOwner := map[string]string{} // kind → definition name, of definitions not from this source
	for i := range existing.Items {
		d := &existing.Items[i]
		byName[d.Name] = d
		if d.Labels[catalogv1.LabelSource] != src.Name {
			kindOwner[d.Spec.Names.Kind] = d.Name
		}
	}
	var applied, conflicts []string
	for _, def := range defs {
		if cur, ok := byName[def.Name]; ok && cur.Labels[catalogv1.LabelSource] != src.Name {
			conflicts = append(conflicts, fmt.Sprintf("%s: the definition exists and is not from this source (%s)", def.Name, owner(cur)))
			continue
		}
		if other, ok := kindOwner[def.Spec.Names.Kind]; ok {
			conflicts = append(conflicts, fmt.Sprintf("%s: kind %s is defined by %s (%s)", def.Name, def.Spec.Names.Kind, other, owner(byName[other])))
			continue
		}
		if err := r.write(ctx, src, def, byName[def.Name]); err != nil {
			return nil, nil, fmt.Errorf("applying %s: %w", def.Name, err)
		}
		applied = append(applied, def.Name)
	}
	inArtifact := make(map[string]bool, len(defs))
	for _, def := range defs {
		inArtifact[def.Name] = true
	}
	for name, d := range byName {
		if d.Labels[catalogv1.LabelSource] == src.Name && !inArtifact[name] {
			if err := client.IgnoreNotFound(r.Client.Delete(ctx, d)); err != nil {
				return nil, nil, err
			}
		}
	}
	slices.Sort(applied)
	slices.Sort(conflicts)
	return applied, conflicts, nil
}

// write creates a definition, or makes the source's existing one say exactly what the source says:
// the spec is replaced whole, so that an edit by hand does not survive (a server-side apply would
// keep fields another manager set). An update that changes nothing writes nothing.
func (r *Reconciler) write(ctx context.Context, src *catalogv1.CatalogSource, def, cur *catalogv1.ApplicationDefinition) error {
	if cur == nil {
		def.Labels = map[string]string{catalogv1.LabelSource: src.Name}
		return r.Client.Create(ctx, def)
	}
	if cur.Labels[catalogv1.LabelSource] == src.Name && equality.Semantic.DeepEqual(cur.Spec, def.Spec) {
		return nil // as the source says: no request at steady state
	}
	next := cur.DeepCopy()
	next.Spec = def.Spec
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	next.Labels[catalogv1.LabelSource] = src.Name
	return r.Client.Update(ctx, next)
}

func owner(d *catalogv1.ApplicationDefinition) string {
	if d == nil {
		return "unknown"
	}
	if s := d.Labels[catalogv1.LabelSource]; s != "" {
		return "from CatalogSource " + s
	}
	return "written by hand"
}

func (r *Reconciler) reconcileDelete(ctx context.Context, src *catalogv1.CatalogSource) error {
	if !controllerutil.ContainsFinalizer(src, Finalizer) {
		return nil
	}
	if err := r.Client.DeleteAllOf(ctx, &catalogv1.ApplicationDefinition{}, client.MatchingLabels{catalogv1.LabelSource: src.Name}); err != nil {
		return err
	}
	return patch.RemoveFinalizer(ctx, r.Client, src, Finalizer)
}

// SetupWithManager registers the reconciler. A change of a Flux source's artifact requeues the
// CatalogSources referring to it; a definition created, deleted or edited requeues the source it
// came from (which restores it) and every source with conflicts (which may have gone away).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("catalogsource").
		For(&catalogv1.CatalogSource{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&catalogv1.ApplicationDefinition{}, handler.EnqueueRequestsFromMapFunc(r.concerned),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})))
	for _, kind := range []string{"GitRepository", "OCIRepository", "Bucket", helmRepository} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(sourceAPIVersion)
		u.SetKind(kind)
		if _, err := mgr.GetRESTMapper().RESTMapping(u.GroupVersionKind().GroupKind(), "v1"); err != nil {
			continue // that Flux source kind is not installed
		}
		b = b.Watches(u, handler.EnqueueRequestsFromMapFunc(r.referring(kind)))
	}
	return b.Complete(r)
}

// concerned maps a definition to the source it came from and the sources with conflicts.
func (r *Reconciler) concerned(ctx context.Context, o client.Object) []reconcile.Request {
	var srcs catalogv1.CatalogSourceList
	if err := r.Client.List(ctx, &srcs); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, s := range srcs.Items {
		if s.Name == o.GetLabels()[catalogv1.LabelSource] || len(s.Status.Conflicts) > 0 {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return reqs
}

func (r *Reconciler) referring(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var srcs catalogv1.CatalogSourceList
		if err := r.Client.List(ctx, &srcs); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for _, s := range srcs.Items {
			ref := s.Spec.SourceRef
			if ref.Kind == kind && ref.Name == o.GetName() && ref.Namespace == o.GetNamespace() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
			}
		}
		return reqs
	}
}
