package meta

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// kstatus condition types (sigs.k8s.io/cli-utils/pkg/kstatus).
const (
	// ReadyCondition is True when the object has converged to its spec.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the controller works towards the spec.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when progress needs a human to change something.
	StalledCondition = "Stalled"
)

// Reasons shared by all services.
const (
	// SucceededReason: the object converged.
	SucceededReason = "Succeeded"
	// ProgressingReason: work is under way.
	ProgressingReason = "Progressing"
	// DeletingReason: the object is being torn down.
	DeletingReason = "Deleting"
	// InvalidSpecReason: the spec cannot be acted upon as written.
	InvalidSpecReason = "InvalidSpec"
)

// ObjectWithConditions is an API object whose status carries metav1.Conditions and an
// observedGeneration: every Flotilla kind implements it.
type ObjectWithConditions interface {
	metav1.Object
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
	GetObservedGeneration() int64
	SetObservedGeneration(int64)
}
