package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Unattributed is the workload name of what no app installed.
const Unattributed = "unattributed"

// UsageReport asks what a tenant (and its descendants) used over a period; the answer is in
// Report. Created, never stored.
//
// +kubebuilder:object:root=true
type UsageReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   UsageReportSpec `json:"spec"`
	Report Report          `json:"report,omitempty"`
}

// UsageReportSpec is the question.
type UsageReportSpec struct {
	// Tenant is the tenant reported on. It is implied by the namespace; if set, it must name the
	// namespace's tenant.
	// +optional
	Tenant string `json:"tenant,omitempty"`
	// Workload limits the report to one app of the tenant's namespace (kind and name as in the
	// apps.flotilla.dev API), or, with kind empty and name "unattributed", to what no app installed.
	// +optional
	Workload *WorkloadReference `json:"workload,omitempty"`
	// StartTimestamp and EndTimestamp bound the period [start, end). End may not be in the future.
	StartTimestamp metav1.Time `json:"startTimestamp"`
	EndTimestamp   metav1.Time `json:"endTimestamp"`
	// Step cuts the period into intervals of this length, one entry per interval, for a time
	// series; without it the period is one interval. A multiple of the report's resolution.
	// +optional
	Step *metav1.Duration `json:"step,omitempty"`
}

// WorkloadReference names an app of the apps.flotilla.dev API (kind and name), or the
// unattributed workload (no kind, name "unattributed").
type WorkloadReference struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	Name string `json:"name"`
}

// Report is the answer.
type Report struct {
	// Resolution is the sampling grid the figures are exact to.
	Resolution metav1.Duration `json:"resolution"`
	// Consumers holds one entry per tenant, workload and interval, in that order; entries with
	// nothing consumed are left out.
	// +optional
	Consumers []Consumer `json:"consumers,omitempty"`
	// Total is the sum of every consumer.
	Total Consumptions `json:"total"`
}

// Consumer is what one workload of one tenant used in one interval.
type Consumer struct {
	// Tenant is the tenant's name, Namespace its namespace.
	Tenant    string            `json:"tenant"`
	Namespace string            `json:"namespace"`
	Workload  WorkloadReference `json:"workload"`
	// StartTimestamp and EndTimestamp bound the interval [start, end).
	StartTimestamp metav1.Time  `json:"startTimestamp"`
	EndTimestamp   metav1.Time  `json:"endTimestamp"`
	Consumptions   Consumptions `json:"consumptions"`
}

// Consumptions are resource × time, as decimal strings.
type Consumptions struct {
	// VCPUHours is requested CPU cores × hours.
	VCPUHours string `json:"vCPUHours"`
	// MemoryGiBHours is requested memory in GiB × hours.
	MemoryGiBHours string `json:"memoryGiBHours"`
	// EphemeralStorageGiBHours is requested ephemeral storage in GiB × hours.
	EphemeralStorageGiBHours string `json:"ephemeralStorageGiBHours"`
	// PersistentStorageGiBHours is the capacity of bound PersistentVolumeClaims in GiB × hours,
	// per storage class; a class with nothing bound is left out.
	// +listType=map
	// +listMapKey=storageClassName
	// +optional
	PersistentStorageGiBHours []StorageClassGiBHours `json:"persistentStorageGiBHours,omitempty"`
}

// StorageClassGiBHours is the persistent storage of one storage class.
type StorageClassGiBHours struct {
	// StorageClassName is the claims' storage class; empty for claims of no class.
	StorageClassName string `json:"storageClassName"`
	// GiBHours is capacity in GiB × hours, as a decimal string.
	GiBHours string `json:"gibHours"`
}
