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
