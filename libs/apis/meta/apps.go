package meta

// Labels on the HelmRelease that stores an app of the apps.flotilla.dev API: the contract
// other services read apps by (the app-catalog-controller's API defines the same keys).
const (
	// LabelAppKind and LabelAppName name the app a HelmRelease stores.
	LabelAppKind = "apps.flotilla.dev/kind"
	LabelAppName = "apps.flotilla.dev/name"
	// LabelDeletionProtection, set to "true", marks an app that must not be deleted on the
	// platform's behalf: neither directly nor by deleting the namespace that holds it. The apps
	// API sets it from the app's spec.deletionProtection; the tenant-controller does not delete
	// a tenant's namespace while it holds HelmReleases carrying it.
	LabelDeletionProtection = "apps.flotilla.dev/deletion-protection"
)

// On a PersistentVolumeClaim of an app (one carrying its release's app.kubernetes.io/instance label).
const (
	// LabelVolumePolicy, set to VolumePolicyDelete, marks a claim that is never kept when its app
	// is deleted, whatever the app's volumePolicy: a disk that only its owner can use and that
	// holds no data of the customer's, such as a managed cluster's worker root disk. Such a claim
	// keeps its owner references and goes with its owner. A claim without it follows the app's
	// volumePolicy.
	LabelVolumePolicy = "apps.flotilla.dev/volume-policy"
	// VolumePolicyDelete is the LabelVolumePolicy value (and an app's volumePolicy) that deletes
	// a claim with its app.
	VolumePolicyDelete = "Delete"
)
