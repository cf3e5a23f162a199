// Package apply reads the live objects of the cluster-controller's children, which have no client-go
// apply configurations (Cluster API, CAPK and Kamaji kinds), refusing those another owner controls;
// ssa.ApplyUnstructured applies them.
package apply
