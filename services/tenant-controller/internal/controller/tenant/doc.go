// Package tenant reconciles Tenants: for each, a namespace, role bindings for its own and its
// ancestors' groups, a quota reserved out of its parent's, container defaults and network
// isolation; and, on deletion, its children first, then its namespace.
package tenant
