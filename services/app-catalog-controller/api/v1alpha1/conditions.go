package v1alpha1

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
)

// Reasons used in ApplicationDefinition and CatalogSource conditions.
const (
	// InvalidSchemaReason: the values schema is not a structural OpenAPI v3 schema.
	InvalidSchemaReason = "InvalidSchema"
	// KindConflictReason: an older definition already uses the kind or one of its names.
	KindConflictReason = "KindConflict"
	// BuiltinConflictReason: a resource Kubernetes itself serves already uses one of the names.
	BuiltinConflictReason = "BuiltinKindConflict"
	// DeliveryNotPermittedReason: the chart creates resources (spec.delivery) that the tenants'
	// delivery identity may not create.
	DeliveryNotPermittedReason = "DeliveryNotPermitted"
	// SourceNotReadyReason: the Flux source has no artifact yet.
	SourceNotReadyReason = "SourceNotReady"
	// ArtifactFailedReason: the source's artifact could not be fetched or read.
	ArtifactFailedReason = "ArtifactFailed"
	// ServedReason: the definition's kind is served under apps.flotilla.dev.
	ServedReason = "Served"
	// PodsCannotStartReason: an app's Helm release is installed, but its pods cannot start
	// (AnnotationWorkloads says why).
	PodsCannotStartReason = "PodsCannotStart"
	// PodsStartingReason: an app whose definition asks for readiness is installed, but its pods
	// (or the objects its health checks judge) are not ready yet (AnnotationStarting says which).
	PodsStartingReason = "PodsStarting"
)

// Labels and annotations on the objects the catalog writes.
const (
	// LabelSource names the CatalogSource that created an ApplicationDefinition.
	LabelSource = "catalog.flotilla.dev/source"
	// LabelSourceCopy marks a Flux source the catalog copied into a tenant's delivery namespace;
	// AnnotationSourceCopyOf names the original (<namespace>/<name>).
	LabelSourceCopy        = "catalog.flotilla.dev/source-copy"
	AnnotationSourceCopyOf = "catalog.flotilla.dev/source-copy-of"
	// LabelAppIdentity marks the ServiceAccount of a delivery namespace the catalog made for an
	// app's identity (named like the app's HelmRelease, which owns it).
	LabelAppIdentity = "catalog.flotilla.dev/app-identity"
	// AnnotationChartDefinition, in a chart's Chart.yaml, holds the ApplicationDefinition (YAML)
	// of the app the chart delivers, for CatalogSources reading a HelmRepository.
	AnnotationChartDefinition = "catalog.flotilla.dev/definition"

	// LabelAppKind, LabelAppName and LabelDefinition tie a HelmRelease back to its app. The
	// first two are the contract other services read apps by, defined in libs/apis/meta.
	LabelAppKind    = meta.LabelAppKind
	LabelAppName    = meta.LabelAppName
	LabelDefinition = "apps.flotilla.dev/definition"
	// LabelRetainedFrom marks a PersistentVolumeClaim kept after its app was deleted with
	// volumePolicy Retain: the value is <kind>.<name> of the app.
	LabelRetainedFrom = "apps.flotilla.dev/retained-from"
	// LabelVolumePolicy, "Delete" on a claim, exempts it from volumePolicy Retain (libs/apis/meta).
	LabelVolumePolicy = meta.LabelVolumePolicy

	// AppsPrefix: label and annotation keys under it are the platform's, never the customer's.
	AppsPrefix = "apps.flotilla.dev/"
	// LabelDeletionProtection stores spec.deletionProtection of an app on its HelmRelease; other
	// services honour it too (libs/apis/meta).
	LabelDeletionProtection = meta.LabelDeletionProtection
	// AnnotationVolumePolicy stores spec.volumePolicy of an app on its HelmRelease.
	AnnotationVolumePolicy = "apps.flotilla.dev/volume-policy"
	// AnnotationManagedFields stores the app's metadata.managedFields (server-side apply).
	AnnotationManagedFields = "apps.flotilla.dev/managed-fields"
	// AnnotationWorkloads, on an app's HelmRelease, says why the app's pods cannot start; absent
	// while they can. The app-catalog-controller writes it; the app is not Ready while it is set.
	AnnotationWorkloads = "apps.flotilla.dev/workloads"
	// AnnotationStarting, on the HelmRelease of an app whose definition asks for readiness, says
	// what of the app is not ready yet; absent once all of it is. The apps API sets it with each
	// new generation, the app-catalog-controller removes it; the app is not Ready while it is set.
	AnnotationStarting = "apps.flotilla.dev/starting"
)

// PlatformValuesKey is the top-level values key the platform fills (tenant, shared services);
// no definition schema may declare it and no customer may set it.
const PlatformValuesKey = "flotilla"

// Withheld reports whether the catalog controller found the definition's current generation
// unservable for a reason only it can judge: a name a built-in resource uses
// (BuiltinConflictReason), or a chart that creates what the tenants' delivery identity may not
// (DeliveryNotPermittedReason). The apps apiserver does not serve such a kind, and it claims no
// name against other definitions.
func Withheld(def *ApplicationDefinition) bool {
	for _, c := range def.Status.Conditions {
		if c.Type == "Stalled" && c.Status == "True" && c.ObservedGeneration == def.Generation &&
			(c.Reason == BuiltinConflictReason || c.Reason == DeliveryNotPermittedReason) {
			return true
		}
	}
	return false
}

// Served reports whether the catalog controller last judged the definition served (Ready with
// ServedReason, in whichever generation). Between definitions created in the same second,
// catalog.Resolve serves such a one first: a newcomer does not take an incumbent's names.
func Served(def *ApplicationDefinition) bool {
	c := apimeta.FindStatusCondition(def.Status.Conditions, meta.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ServedReason
}
