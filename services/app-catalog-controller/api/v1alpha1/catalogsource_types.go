package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CatalogSource adds the ApplicationDefinitions found in a Flux source's artifact to the
// catalog, so a platform team or a partner can publish apps without rebuilding Flotilla.
// Definitions it creates carry the label catalog.flotilla.dev/source=<name>; a kind already
// defined elsewhere is reported as a conflict and left alone.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.sourceRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CatalogSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CatalogSourceSpec `json:"spec"`
	// +optional
	Status CatalogSourceStatus `json:"status,omitempty"`
}

// CatalogSourceSpec names the Flux source and where in its artifact the definitions are.
// +kubebuilder:validation:XValidation:rule="self.sourceRef.kind != 'HelmRepository' || !has(self.path)",message="spec.path: a HelmRepository's definitions are in its charts, not at a path"
type CatalogSourceSpec struct {
	// SourceRef is the Flux source holding the definitions:
	//   - a GitRepository, OCIRepository or Bucket whose artifact holds ApplicationDefinition
	//     manifests (YAML, one or more documents per file);
	//   - an HTTP(S) HelmRepository whose charts carry their definition in the Chart.yaml
	//     annotation catalog.flotilla.dev/definition. The newest release (pre-releases aside)
	//     of each chart counts; its definition is applied with spec.chart set to that chart and
	//     version in this repository.
	SourceRef SourceReference `json:"sourceRef"`
	// Path inside the artifact; defaults to the root. Not for a HelmRepository.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="spec.path may not contain .."
	Path string `json:"path,omitempty"`
}

// CatalogSourceStatus reports what the source contributed.
type CatalogSourceStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Revision of the artifact last applied.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Definitions applied from the artifact, by name.
	// +optional
	Definitions []string `json:"definitions,omitempty"`
	// Conflicts: definitions in the artifact whose kind another source or a hand-written
	// definition already provides; they are not applied.
	// +optional
	Conflicts []string `json:"conflicts,omitempty"`
}

// +kubebuilder:object:root=true

// CatalogSourceList is a list of CatalogSources.
type CatalogSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CatalogSource `json:"items"`
}

// GetConditions implements meta.ObjectWithConditions.
func (s *CatalogSource) GetConditions() []metav1.Condition { return s.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (s *CatalogSource) SetConditions(c []metav1.Condition) { s.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (s *CatalogSource) GetObservedGeneration() int64 { return s.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (s *CatalogSource) SetObservedGeneration(g int64) { s.Status.ObservedGeneration = g }
