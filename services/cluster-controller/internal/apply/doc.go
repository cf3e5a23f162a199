// Package apply server-side applies the cluster-controller's children, which have no client-go
// apply configurations (Cluster API, CAPK and Kamaji kinds), as unstructured objects under one
// field owner; and skips the request when the live object already holds what would be applied.
package apply
