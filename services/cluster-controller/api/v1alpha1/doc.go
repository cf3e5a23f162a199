// Package v1alpha1 is the cluster.flotilla.dev/v1alpha1 API: KubernetesCluster, a managed
// Kubernetes cluster of a tenant (a hosted control plane and groups of worker VMs). Other services
// import this package (and only this one) to read a cluster's state.
// +kubebuilder:object:generate=true
// +groupName=cluster.flotilla.dev
package v1alpha1
