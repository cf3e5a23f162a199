package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Tenant is a customer or a team. A Tenant lives in its parent's namespace and owns a namespace of
// its own, named after the path from the root: tenant "acme" in "tenant-root" owns "tenant-acme",
// tenant "dev" in "tenant-acme" owns "tenant-acme-dev". The root tenant is named "root" and lives
// in, and owns, "tenant-root".
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Owns",type=string,JSONPath=`.status.namespace`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.path`,priority=1
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.status.host`
// +kubebuilder:printcolumn:name="Ingress",type=string,JSONPath=`.status.services.ingress`,priority=1
// +kubebuilder:printcolumn:name="Monitoring",type=string,JSONPath=`.status.services.monitoring`,priority=1
// +kubebuilder:printcolumn:name="Etcd",type=string,JSONPath=`.status.services.etcd`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z][a-z0-9]*$')",message="metadata.name must match ^[a-z][a-z0-9]*$: lower-case letters and digits, starting with a letter (dashes encode the hierarchy in namespace names)"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 56",message="metadata.name may be at most 56 characters: the tenant's namespace name (tenant-<path>) must fit 63"
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec TenantSpec `json:"spec,omitempty"`
	// +optional
	Status TenantStatus `json:"status,omitempty"`
}

// TenantSpec is what the parent tenant's administrators declare for this tenant.
type TenantSpec struct {
	// Host is the DNS name under which the tenant's services are published.
	// Defaults to <name>.<parent's host>. It must be the parent's host or a name below it, so that
	// a tenant cannot claim a sibling's domain; only a platform admin (who may `escalate` tenants) may
	// set another.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.host must be a lower-case DNS name such as acme.example.org"
	Host string `json:"host,omitempty"`

	// Ingress: this tenant hosts its own ingress; otherwise it uses the nearest ancestor's.
	// +optional
	Ingress bool `json:"ingress,omitempty"`
	// Monitoring: this tenant hosts its own monitoring; otherwise it uses the nearest ancestor's.
	// +optional
	Monitoring bool `json:"monitoring,omitempty"`
	// Etcd: this tenant hosts its own etcd (for managed Kubernetes control planes); otherwise it
	// uses the nearest ancestor's.
	// +optional
	Etcd bool `json:"etcd,omitempty"`

	// SchedulingClass places the tenant's workloads. It is inherited by all descendants; a tenant
	// may set one only where no ancestor did.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	SchedulingClass string `json:"schedulingClass,omitempty"`

	// ResourceQuotas caps what the tenant's namespace and all its descendants may use, keyed by
	// ResourceQuota resource name (cpu, requests.memory, count/pods, …). Children's quotas are
	// reserved out of the parent's: their sum may not exceed the parent's, and a child must declare
	// every resource its parent caps. The tenant's own namespace gets what is left.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ResourceQuotas corev1.ResourceList `json:"resourceQuotas,omitempty"`

	// LimitRange sets default container requests and limits in the tenant's namespace.
	// +optional
	LimitRange *LimitRangeSpec `json:"limitRange,omitempty"`

	// Access binds subjects to tenant roles besides the default OIDC groups
	// (<namespace>-<role>). Bindings apply in this tenant's namespace and all its descendants.
	// Whoever writes it may grant only a role they could bind themselves in the parent's namespace
	// (RBAC's escalation rule: `bind` on the role's ClusterRole there, or holding an equal or higher
	// tenant role there); never to a `system:` user or group; a ServiceAccount only from this
	// tenant's own namespace or its descendants' unless the writer is a platform admin.
	// +optional
	// +listType=map
	// +listMapKey=role
	// +kubebuilder:validation:MaxItems=4
	Access []AccessBinding `json:"access,omitempty"`

	// PodSecurity sets the Pod Security Admission level enforced in this tenant's namespace and,
	// unless they set their own, its descendants'. Unset everywhere, `baseline` is enforced;
	// `restricted` is always warned and audited. Only a platform admin may set or change it: a
	// tenant role must never loosen the isolation of the node its pods run on.
	// +optional
	PodSecurity *PodSecurity `json:"podSecurity,omitempty"`
}

// PodSecurity is a Pod Security Admission level for a tenant's namespaces.
type PodSecurity struct {
	// Enforce is the level pods must meet to be admitted.
	Enforce PodSecurityLevel `json:"enforce"`
}

// PodSecurityLevel is one of the Pod Security Standards.
// +kubebuilder:validation:Enum=privileged;baseline;restricted
type PodSecurityLevel string

// The Pod Security Standards, from least to most restrictive.
const (
	PodSecurityPrivileged PodSecurityLevel = "privileged"
	PodSecurityBaseline   PodSecurityLevel = "baseline"
	PodSecurityRestricted PodSecurityLevel = "restricted"
)

// DefaultPodSecurity is enforced where no tenant of the path sets spec.podSecurity.
const DefaultPodSecurity = PodSecurityBaseline

// A platform admin may do what tenant roles never allow: grant any ServiceAccount, set any host,
// set spec.podSecurity. The webhook asks a SubjectAccessReview whether the requester may use the
// verb PlatformAdminVerb on tenants (tenancy.flotilla.dev) at cluster scope. No tenant role grants
// it (they are bound in namespaces only, and never with this verb), and RBAC keeps a tenant
// super-admin from granting it; cluster-admin has it, and the chart's ClusterRole
// flotilla:platform-admin grants it.
const (
	PlatformAdminVerb     = "escalate"
	PlatformAdminResource = "tenants"
)

// LimitRangeSpec holds per-container defaults.
type LimitRangeSpec struct {
	// Default limits for containers that set none.
	// +optional
	Default corev1.ResourceList `json:"default,omitempty"`
	// DefaultRequest is the requests for containers that set none.
	// +optional
	DefaultRequest corev1.ResourceList `json:"defaultRequest,omitempty"`
}

// TenantRole is one of the four roles a tenant grants.
// +kubebuilder:validation:Enum=view;use;admin;super-admin
type TenantRole string

// The tenant roles, each a ClusterRole "flotilla:tenant:<role>" shipped with the chart.
const (
	RoleView       TenantRole = "view"
	RoleUse        TenantRole = "use"
	RoleAdmin      TenantRole = "admin"
	RoleSuperAdmin TenantRole = "super-admin"
)

// Roles lists the tenant roles from least to most privileged.
var Roles = []TenantRole{RoleView, RoleUse, RoleAdmin, RoleSuperAdmin}

// AccessBinding grants a role to extra subjects.
// +kubebuilder:validation:XValidation:rule="self.subjects.all(s, s.kind != 'ServiceAccount' || (has(s.__namespace__) && s.__namespace__.size() > 0))",message="spec.access[].subjects[].namespace is required for a ServiceAccount"
type AccessBinding struct {
	// Role granted.
	Role TenantRole `json:"role"`
	// Subjects granted the role.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Subjects []rbacv1.Subject `json:"subjects"`
}

// TenantStatus is what the tenant-controller observed and decided.
type TenantStatus struct {
	// ObservedGeneration is the generation last acted upon (set when Ready or Stalled).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled and the domain conditions NamespaceReady,
	// AccessReady, QuotaReady and NetworkPolicyReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Namespace owned by the tenant.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Path from the root, dot-separated: root.acme.dev.
	// +optional
	Path string `json:"path,omitempty"`
	// Depth below the root tenant (root is 0).
	// +optional
	Depth int32 `json:"depth,omitempty"`
	// Host in effect (spec.host or derived from the parent).
	// +optional
	Host string `json:"host,omitempty"`
	// SchedulingClass in effect (own or inherited).
	// +optional
	SchedulingClass string `json:"schedulingClass,omitempty"`
	// Services names the namespace that provides each shared service to this tenant.
	// +optional
	Services SharedServices `json:"services,omitempty"`
}

// SharedServices names, per shared service, the namespace of the tenant that provides it.
type SharedServices struct {
	// +optional
	Ingress string `json:"ingress,omitempty"`
	// +optional
	Monitoring string `json:"monitoring,omitempty"`
	// +optional
	Etcd string `json:"etcd,omitempty"`
}

// +kubebuilder:object:root=true

// TenantList is a list of Tenants.
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tenant `json:"items"`
}

// GetConditions implements meta.ObjectWithConditions.
func (t *Tenant) GetConditions() []metav1.Condition { return t.Status.Conditions }

// SetConditions implements meta.ObjectWithConditions.
func (t *Tenant) SetConditions(c []metav1.Condition) { t.Status.Conditions = c }

// GetObservedGeneration implements meta.ObjectWithConditions.
func (t *Tenant) GetObservedGeneration() int64 { return t.Status.ObservedGeneration }

// SetObservedGeneration implements meta.ObjectWithConditions.
func (t *Tenant) SetObservedGeneration(g int64) { t.Status.ObservedGeneration = g }
