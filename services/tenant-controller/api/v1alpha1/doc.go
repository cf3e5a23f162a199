// Package v1alpha1 is the tenancy.flotilla.dev/v1alpha1 API: the Tenant kind. Other services
// import this package (and only this one) to find a tenant's namespace and shared services.
// +kubebuilder:object:generate=true
// +groupName=tenancy.flotilla.dev
package v1alpha1
