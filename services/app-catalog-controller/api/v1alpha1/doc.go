// Package v1alpha1 is the catalog.flotilla.dev/v1alpha1 API: ApplicationDefinition (what a
// customer may order, and which values they may set) and CatalogSource (a Flux source holding
// more definitions). The apps themselves are served by the app-catalog apiserver under
// apps.flotilla.dev, never as CRDs.
// +kubebuilder:object:generate=true
// +groupName=catalog.flotilla.dev
package v1alpha1
