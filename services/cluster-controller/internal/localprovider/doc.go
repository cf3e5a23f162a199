// Package localprovider is the local provider STAND-IN for Kamaji and KubeVirt: nothing on a
// development machine or in the tests runs pods or virtual machines, so it plays the two
// providers faithfully enough that Cluster API's real controllers drive a cluster end to end.
// It is never shipped in a chart: it runs in the tests and, as cmd/local-provider, beside
// `make demo`.
//
//   - Kamaji: for every KamajiControlPlane whose DataStore (spec.dataStoreName) exists it starts
//     a real kube-apiserver process whose storage is the platform's etcd, whatever the DataStore
//     describes, under the key prefix /<spec.dataStoreSchema> (Kamaji's datastore model), and writes what Kamaji's Cluster API provider writes: spec.controlPlaneEndpoint,
//     status (version, initialization, replicas, Available), Cluster API's <cluster>-ca and
//     <cluster>-kubeconfig Secrets (key value), controlled by the KamajiControlPlane. The
//     externally managed KubevirtCluster (annotation cluster.x-k8s.io/managed-by) gets the
//     endpoint and status.ready, which CAPK leaves to the control-plane provider. When the
//     KamajiControlPlane is deleted, the process is stopped and the keys under its prefix are
//     deleted from etcd, as Kamaji deletes a control plane's data from its DataStore (a finalizer
//     holds the KamajiControlPlane until then).
//   - KubeVirt and the guest: a KubevirtMachine whose Machine's bootstrap data exists "boots": its
//     Node registers in the customer's API server with providerID kubevirt://<name>, Ready, with
//     the node labels and taints of its KubeadmConfig, and the KubevirtMachine reports ready with
//     that providerID, so that Cluster API's Machine becomes Running by Cluster API's own logic.
//     Deleting the KubevirtMachine (the VM) removes the Node.
//   - The kubelet, for the cluster-controller's infrastructure namespace only (Options.
//     InfraNamespace): each cluster's cloud-controller-manager, CSI controller and autoscaler
//     Deployment reports its replicas available, though none of their containers runs. Where
//     kube-controller-manager's Deployment controller runs (Options.InfraPods), their pods bound
//     to a Node no kubelet runs report their containers running and ready instead.
//   - The customer cluster's DaemonSet controller and kubelets, for the add-ons only: each
//     DaemonSet in an add-on's namespace (the CNI, the CSI node plugin) reports a ready pod on
//     every Node, so that helm-controller's wait for the add-on's release ends.
//
// One kube-apiserver stands for all of a control plane's replicas; no kube-controller-manager or
// scheduler runs for the customer's cluster, and no kubelet: Nodes do not heartbeat and no pod runs.
package localprovider
