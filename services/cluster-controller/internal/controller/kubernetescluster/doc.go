// Package kubernetescluster is the controller of KubernetesClusters: it applies the Cluster API,
// CAPK and Kamaji objects a cluster is made of, derives the cluster's conditions from theirs, and
// tears them down in order (workers, then the control plane) when the cluster is deleted.
package kubernetescluster
