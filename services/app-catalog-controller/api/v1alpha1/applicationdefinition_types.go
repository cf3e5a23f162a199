package v1alpha1

import (
	kustomize "github.com/fluxcd/pkg/apis/kustomize"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
)

// ApplicationDefinition is one entry of the catalog: a kind customers can create under
// apps.flotilla.dev/v1alpha1, the values they may set, and the Helm chart that delivers it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla,shortName=appdef
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.names.kind`
// +kubebuilder:printcolumn:name="Title",type=string,JSONPath=`.spec.display.title`
// +kubebuilder:printcolumn:name="Chart",type=string,JSONPath=`.spec.chart.name`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.chart.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Description",type=string,priority=1,JSONPath=`.spec.display.description`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.names.plural",message="metadata.name must equal spec.names.plural"
type ApplicationDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ApplicationDefinitionSpec `json:"spec"`
	// +optional
	Status ApplicationDefinitionStatus `json:"status,omitempty"`
}

// ApplicationDefinitionSpec declares the kind, its values and its delivery.
type ApplicationDefinitionSpec struct {
	// Names of the kind served under apps.flotilla.dev/v1alpha1.
	Names Names `json:"names"`

	// Schema is the OpenAPI v3 schema of the app's spec: the values a customer may set, with
	// their defaults. It must be structural (as for a CRD) and of type object. The properties
	// deletionProtection, volumePolicy and flotilla are reserved.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Schema apiextensionsv1.JSON `json:"schema"`

	// ForbiddenPaths are value paths rejected whatever the schema says: dot-separated keys,
	// where * matches any one key or list index (image, *.securityContext, hostNetwork).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	ForbiddenPaths []string `json:"forbiddenPaths,omitempty"`

	// Chart delivers the app.
	Chart Chart `json:"chart"`

	// Delivery declares what the chart creates. A chart is installed as the tenant's delivery
	// identity, never with helm-controller's own: it may create, in the app's namespace only, what
	// the ClusterRole flotilla:tenant:delivery grants. A definition declaring a resource that role
	// does not grant is Stalled (DeliveryNotPermitted) and not served until a platform admin
	// grants it (a ClusterRole labelled flotilla.dev/aggregate-to-tenant-delivery=true).
	// +optional
	Delivery Delivery `json:"delivery,omitempty"`

	// Release tunes the HelmRelease written for each app.
	// +optional
	Release Release `json:"release,omitempty"`

	// Readiness decides when an app is Ready, beyond its Helm release being installed.
	// +optional
	Readiness Readiness `json:"readiness,omitempty"`

	// Persistence is the default fate of an app's PersistentVolumeClaims on deletion.
	// +optional
	Persistence Persistence `json:"persistence,omitempty"`

	// Expose lists the Secrets and Services the chart creates that the tenant is shown in the
	// app's status. $(release) in a name stands for the app's Helm release name.
	// +optional
	Expose Expose `json:"expose,omitempty"`

	// Display is shown by user interfaces.
	// +optional
	Display Display `json:"display,omitempty"`

	// TenantService makes this kind the provider of a tenant's shared service: in the namespace of
	// every tenant that hosts that service itself (Tenant spec.ingress, spec.monitoring or
	// spec.etcd), the catalog orders an app of this kind named after the service, with its
	// defaults, through the apps API like any order. It is ordered again if deleted while the
	// tenant hosts the service, and never changed or deleted by the catalog: the tenant's admins
	// own its values. With several served definitions for one service, the first by name is used.
	// +optional
	// +kubebuilder:validation:Enum=ingress;monitoring;etcd
	TenantService string `json:"tenantService,omitempty"`
}

// Names of the served kind, as in a CRD.
type Names struct {
	// Kind is the CamelCase kind, such as Postgres.
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Plural is the lower-case resource name, such as postgreses.
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*$`
	// +kubebuilder:validation:MaxLength=63
	Plural string `json:"plural"`
	// Singular is the lower-case singular name; defaults to the lower-cased kind.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*$`
	// +kubebuilder:validation:MaxLength=63
	Singular string `json:"singular,omitempty"`
	// ShortNames for kubectl.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9]*$`
	ShortNames []string `json:"shortNames,omitempty"`
	// Categories for kubectl get <category>; "flotilla" and "apps" are always added.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Categories []string `json:"categories,omitempty"`
	// AppNamePattern is a regular expression every app name of this kind must match, beyond
	// being a DNS label: for charts that cannot take every name (a tenant's name, say, may not
	// hold a dash). A name that does not match is refused at the API, naming metadata.name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AppNamePattern string `json:"appNamePattern,omitempty"`
}

// Delivery declares the resources a chart creates.
type Delivery struct {
	// Resources the chart creates (and Helm reads back, updates and deletes), by API group.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Resources []DeliveredResources `json:"resources,omitempty"`
}

// DeliveredResources are resources of one API group a chart creates.
type DeliveredResources struct {
	// APIGroup of the resources; empty for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	APIGroup string `json:"apiGroup"`
	// Resources are plural resource names, such as clusters.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9]*$`
	// +kubebuilder:validation:items:MaxLength=63
	Resources []string `json:"resources"`
}

// DeliveryVerbs are what the delivery identity needs on each resource a chart creates: Helm creates,
// reads back, waits for, upgrades and uninstalls them.
var DeliveryVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// Chart is a chart in a Flux source.
type Chart struct {
	// SourceRef is the Flux source holding the chart.
	SourceRef SourceReference `json:"sourceRef"`
	// Name of the chart in the source (a path for GitRepository and OCIRepository... sources).
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Version is a semver version or range; defaults to the newest.
	// +optional
	Version string `json:"version,omitempty"`
}

// SourceReference names a Flux source.
type SourceReference struct {
	// Kind of the Flux source.
	// +kubebuilder:validation:Enum=HelmRepository;GitRepository;OCIRepository;Bucket
	Kind string `json:"kind"`
	// Name of the source.
	Name string `json:"name"`
	// Namespace of the source.
	Namespace string `json:"namespace"`
}

// Release tunes the HelmRelease of each app.
type Release struct {
	// Prefix of the Helm release name: an app named db of a definition with prefix pg- is
	// released as pg-db. Defaults to the singular name followed by a dash.
	// +optional
	// +kubebuilder:validation:Pattern=`^([a-z][a-z0-9-]*)?$`
	// +kubebuilder:validation:MaxLength=20
	Prefix *string `json:"prefix,omitempty"`
	// InstallTimeout bounds a Helm install; defaults to 5m.
	// +optional
	InstallTimeout *metav1.Duration `json:"installTimeout,omitempty"`
	// UpgradeTimeout bounds a Helm upgrade; defaults to 5m.
	// +optional
	UpgradeTimeout *metav1.Duration `json:"upgradeTimeout,omitempty"`
	// Interval between drift checks of the release; defaults to 10m.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// Readiness of an app: what must be ready, beyond its Helm release being installed, for the app
// to be Ready. The app-catalog-controller judges it and the apps API shows it (Helm's own wait is
// not used: it would hold one of helm-controller's workers for as long as an app cannot start,
// and a tenant's apps that never start would hold them all).
type Readiness struct {
	// Wait: the app is Ready only once the release's StatefulSets and Deployments (those labelled
	// app.kubernetes.io/instance with its name, Helm's convention) have every replica ready and up
	// to date (kstatus).
	// Off by default: then the release being installed, with no pod failing, is enough.
	// +optional
	Wait bool `json:"wait,omitempty"`
	// HealthChecks are CEL expressions judging the release's custom resources of a kind (Flux's
	// healthCheckExprs: inProgress, failed, current; objects found by the same label); they imply
	// Wait. The app-catalog-controller must be allowed to list that kind (a ClusterRole labelled
	// catalog.flotilla.dev/aggregate-to-readiness).
	// +optional
	HealthChecks []kustomize.CustomHealthCheck `json:"healthChecks,omitempty"`
}

// Waits reports whether the app is Ready only once its workloads are.
func (r Readiness) Waits() bool { return r.Wait || len(r.HealthChecks) > 0 }

// VolumePolicy is what happens to an app's PersistentVolumeClaims when the app is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type VolumePolicy string

const (
	// VolumePolicyDelete deletes the claims with the app.
	VolumePolicyDelete VolumePolicy = meta.VolumePolicyDelete
	// VolumePolicyRetain keeps them, labelled with the app they came from.
	VolumePolicyRetain VolumePolicy = "Retain"
)

// Persistence of an app's volumes.
type Persistence struct {
	// DefaultVolumePolicy applies when the app does not set spec.volumePolicy; defaults to Retain.
	// +optional
	DefaultVolumePolicy VolumePolicy `json:"defaultVolumePolicy,omitempty"`
	// AllowOverride lets the customer set spec.volumePolicy.
	// +optional
	AllowOverride bool `json:"allowOverride,omitempty"`
}

// Expose lists objects shown to the tenant.
type Expose struct {
	// +optional
	// +listType=set
	Secrets []string `json:"secrets,omitempty"`
	// +optional
	// +listType=set
	Services []string `json:"services,omitempty"`
}

// Display metadata for user interfaces.
type Display struct {
	// +optional
	Title string `json:"title,omitempty"`
	// +optional
	Description string `json:"description,omitempty"`
	// Icon is a URL or a data: URI.
	// +optional
	Icon string `json:"icon,omitempty"`
}

// ApplicationDefinitionStatus reports whether the kind is served.
type ApplicationDefinitionStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the kind is served), Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// ApplicationDefinitionList is a list of ApplicationDefinitions.
type ApplicationDefinitionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApplicationDefinition `json:"items"`
}

// GetConditions implements meta.ObjectWithConditions.
func (d *ApplicationDefinition) GetConditions() []metav1.Condition { return d.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (d *ApplicationDefinition) SetConditions(c []metav1.Condition) { d.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (d *ApplicationDefinition) GetObservedGeneration() int64 { return d.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (d *ApplicationDefinition) SetObservedGeneration(g int64) { d.Status.ObservedGeneration = g }
