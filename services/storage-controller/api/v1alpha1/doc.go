// Package v1alpha1 is the storage.flotilla.dev/v1alpha1 API: StoragePolicy, a class of
// replicated (or local) block storage on LINSTOR/DRBD. Other services import this package (and
// only this one) to find a policy's StorageClass and capacity.
// +kubebuilder:object:generate=true
// +groupName=storage.flotilla.dev
package v1alpha1
