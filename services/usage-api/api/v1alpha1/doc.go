// Package v1alpha1 is the usage.flotilla.dev API: UsageReport, what a tenant and its workloads
// used over a period.
//
// A UsageReport is created, never stored, like a SubjectAccessReview: a POST of its spec to
// /apis/usage.flotilla.dev/v1alpha1/namespaces/<tenant namespace>/usagereports answers with the
// same object and its report filled in.
//
// # What counts (the contract)
//
// Usage is reported from samples of the cluster's state, taken every Resolution (60 s by
// default), and every figure is exact with respect to those samples:
//
//   - A pod counts from the moment it is bound to a node until it is deleted or reaches
//     Succeeded or Failed, at its effective requests as kube-scheduler computes them: the larger
//     of the sum of the regular containers (sidecars included) and any init container, plus the
//     pod overhead. A pod that is not yet scheduled counts nothing.
//   - A PersistentVolumeClaim counts while it is Bound, at the capacity of the volume bound to it
//     (what its status.capacity reports), under its storage class.
//   - The period [startTimestamp, endTimestamp) is cut into instants on the resolution's grid
//     (multiples of Resolution since the Unix epoch); the instant t stands for the Resolution
//     before it, (t-Resolution, t]. At each instant a pod or claim counts at the value of its
//     latest sample taken in that Resolution, so every sample counts once, for one Resolution.
//   - Gaps: when a metrics source could not be scraped (it was restarting, or the metrics store
//     was down), its pods or claims keep the value of their latest sample for up to MaxGap
//     (10 min by default); time is neither dropped nor counted twice. A pod or claim missing
//     from a successful scrape has ended.
//   - A sample seen twice (two replicas of a metrics source) counts once.
//   - vCPUHours is cores × hours, MemoryGiBHours and EphemeralStorageGiBHours are GiB (2^30
//     bytes) × hours, PersistentStorageGiBHours GiB of capacity × hours per storage class.
//   - Attribution: a pod or claim belongs to the app whose HelmRelease installed it (its
//     app.kubernetes.io/instance label is the release's name), also after the app is deleted
//     (the metrics store keeps the HelmReleases' history). A managed Kubernetes cluster's
//     control plane pods, worker VM pods and their root disks carry its app's label (the
//     cluster-controller sets it), so they count as the cluster's app. Anything else in a tenant
//     namespace is the tenant's workload "unattributed".
//   - A tenant's report holds one entry per tenant (itself and every descendant), workload and
//     interval, and a total; nothing outside the tenant's subtree.
//
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=dev.flotilla.usage.v1alpha1
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +groupName=usage.flotilla.dev
package v1alpha1
