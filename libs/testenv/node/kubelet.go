package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// kubeletConfig: cgroupfs under the node's own cgroup (cgroups are v1 here, which kubelets since
// 1.35 refuse unless told), the node's state under its directory, only kube-apiserver's client
// certificate may use the kubelet's API (x509 against the node CA, webhook authorization), and
// eviction thresholds low enough for a developer's disk.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
failSwapOn: false
address: %[2]q
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
clusterDomain: cluster.local
clusterDNS: [%[3]q]
podLogsDir: %[4]q
containerRuntimeEndpoint: %[5]q
volumePluginDir: %[6]q
resolvConf: %[7]q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[8]q}
authorization: {mode: Webhook}
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// kubeProxyConfig: iptables, the node's pod range as the cluster's.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %[1]q
hostnameOverride: %[2]q
clientConnection: {kubeconfig: %[3]q}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0}
`

func (n *Node) startKubelet(ctx context.Context, bin string) error {
	kubeconfig, err := n.kubeconfig("kubelet", "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	// kube-apiserver is a client of kubelets (logs, exec): with rights to their whole API.
	if err := ensure(ctx, n.env.Client, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flotilla:" + testenv.KubeletClientUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: testenv.KubeletClientUser}},
	}); err != nil {
		return err
	}
	resolv := filepath.Join(n.Dir, "resolv.conf") // pods resolve through the cluster DNS alone
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		return err
	}
	config := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, kubeletConfig, n.Net.CgroupParent(), n.Net.NodeIP().String(), n.Net.DNSIP().String(),
		filepath.Join(n.Dir, "pod-logs"), "unix://"+n.socket(), filepath.Join(n.Dir, "kubelet", "volume-plugins"), resolv,
		testenv.NodeCAFile(n.env.ControlPlane.APIServer.CertDir)), 0o644); err != nil {
		return err
	}
	return n.inNode("kubelet", filepath.Join(bin, "kubelet"), n.processEnv(bin), "--config="+config, "--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name, "--node-ip="+n.Net.NodeIP().String(), "--root-dir="+filepath.Join(n.Dir, "kubelet"))
}

func (n *Node) startKubeProxy(bin string) error {
	kubeconfig, err := n.kubeconfig("kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	config := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, kubeProxyConfig, n.Net.PodCIDR(), n.Name, kubeconfig), 0o644); err != nil {
		return err
	}
	return n.inNode("kube-proxy", filepath.Join(bin, "kube-proxy"), n.processEnv(bin), "--config="+config)
}

// startNetworkPolicies runs kube-router with its firewall alone (no routing, no service proxy, no
// CNI of its own): NetworkPolicies enforced on every packet to and from the node's pods.
func (n *Node) startNetworkPolicies(ctx context.Context, bin string) error {
	const user = "system:kube-router"
	kubeconfig, err := n.kubeconfig("kube-router", user)
	if err != nil {
		return err
	}
	name := "flotilla:kube-router"
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "services", "endpoints", "nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}},
	} {
		if err := ensure(ctx, n.env.Client, o); err != nil {
			return err
		}
	}
	return n.inNode("kube-router", filepath.Join(bin, "kube-router"), n.processEnv(bin), "--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name, "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false", "--enable-pod-egress=false", "--service-cluster-ip-range="+n.Net.ServiceCIDR(),
		"--health-port=0", "--metrics-port=0")
}
