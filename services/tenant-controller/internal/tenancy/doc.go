// Package tenancy is the tenant-controller's domain: how the tenant tree maps onto namespace names,
// the validation rules shared by the admission webhook and the reconciler, and the desired
// namespace, role bindings, quota, limit range and network policies of a tenant.
package tenancy
