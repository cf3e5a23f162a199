// Package webhook is the Tenant admission webhook: it rejects, with messages naming the field,
// tenants that do not fit their place in the tree (missing parent, quota beyond what the parent
// has left, a scheduling class an ancestor already chose).
package webhook
