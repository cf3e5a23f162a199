package capitest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/localprovider"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

var (
	machineSetGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineSet"}
	machineGVK    = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
)

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

func list(t *testing.T, gvk schema.GroupVersionKind, ns string, labels map[string]string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := k8s.List(context.Background(), l, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// machines lists the Machines of a node group, and how many of them Cluster API reports Running
// with a nodeRef.
func machines(t *testing.T, ns, group string) (all []unstructured.Unstructured, running int) {
	t.Helper()
	all = list(t, machineGVK, ns, map[string]string{clusterapi.LabelNodeGroup: group})
	for _, m := range all {
		phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		if phase == "Running" && node != "" && m.GetDeletionTimestamp() == nil {
			running++
		}
	}
	return all, running
}

// readyNodes returns the names of the Ready Nodes of the customer's cluster with a KubeVirt
// providerID.
func readyNodes(t *testing.T, customer client.Client) []string {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := customer.List(context.Background(), nodes); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && strings.HasPrefix(n.Spec.ProviderID, localprovider.ProviderIDPrefix) {
				names = append(names, n.Name)
			}
		}
	}
	return names
}

func clusterCondition(t *testing.T, kc *clusterapi.KubernetesCluster, cond string) *clusterapi.KubernetesCluster {
	t.Helper()
	got := &clusterapi.KubernetesCluster{}
	eventually(t, kc.Name+" "+cond, func() (bool, error) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kc), got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, cond)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
			return false, fmt.Errorf("%s: %+v", cond, c)
		}
		return true, nil
	})
	return got
}

// Cluster API's real controllers with the local provider stand-in for Kamaji and KubeVirt: a
// KubernetesCluster becomes a real API server on the platform's etcd that the customer reaches
// with the kubeconfig in its Secret, and worker Nodes in it that Cluster API reports Running.
func TestCustomerClusterEndToEnd(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme", Labels: map[string]string{tenancyv1.LabelEtcd: "acme"}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	stopProvider := runProvider(t, "acme", state)
	t.Cleanup(func() { stopProvider() })
	kc := smallCluster("acme", "prod", 2, 4)
	kc.Spec.NodeGroups[0].Labels = map[string]clusterapi.LabelValue{"team": "web"}
	kc.Spec.NodeGroups[0].Taints = []clusterapi.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}
	kc.Spec.Addons.Ingress = true
	if err := k8s.Create(ctx, kc); err != nil {
		t.Fatal(err)
	}

	got := clusterCondition(t, kc, clusterapi.ControlPlaneReadyCondition)
	if got.Status.Version != "v1.37.2" || !strings.HasPrefix(got.Status.Endpoint, "https://127.0.0.1:") {
		t.Errorf("control plane version %q at %q", got.Status.Version, got.Status.Endpoint)
	}
	kubeconfig, customer := customerKubeconfig(t, got)

	t.Run("the customer's kubeconfig answers kubectl get ns", func(t *testing.T) {
		out, err := kubectl(t, kubeconfig, "get", "ns", "-o", "name")
		if err != nil || !strings.Contains(out, "namespace/kube-system") || !strings.Contains(out, "namespace/default") {
			t.Fatalf("kubectl get ns: %v\n%s", err, out)
		}
	})

	t.Run("the customer's state is in the platform's etcd under the cluster's own prefix", func(t *testing.T) {
		if err := customer.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
			t.Fatal(err)
		}
		if n := etcdKeys(t, "/acme_prod/namespaces/shop"); n != 1 {
			t.Errorf("%d keys /acme_prod/namespaces/shop in the platform's etcd", n)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "shop"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("the customer's namespace is visible in the management cluster: %v", err)
		}
	})

	t.Run("workers boot: Nodes in the customer's cluster, Machines Running by Cluster API", func(t *testing.T) {
		eventually(t, "two Running Machines of node group default", func() (bool, error) {
			_, running := machines(t, "acme", "default")
			return running == 2, nil
		})
		ms, _ := machines(t, "acme", "default")
		for _, m := range ms {
			infra, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "kind")
			boot, _, _ := unstructured.NestedString(m.Object, "spec", "bootstrap", "configRef", "kind")
			version, _, _ := unstructured.NestedString(m.Object, "spec", "version")
			owner, _, _ := unstructured.NestedString(m.Object, "metadata", "labels", "cluster.x-k8s.io/deployment-name")
			if infra != "KubevirtMachine" || boot != "KubeadmConfig" || version != "v1.37.2" || owner != cluster.MachineDeploymentName("prod", "default") {
				t.Errorf("machine %s: infrastructure %s, bootstrap %s, version %s, deployment %s", m.GetName(), infra, boot, version, owner)
			}
		}
		nodes := readyNodes(t, customer)
		if len(nodes) != 2 {
			t.Fatalf("Ready nodes %v", nodes)
		}
		node := &corev1.Node{}
		if err := customer.Get(ctx, client.ObjectKey{Name: nodes[0]}, node); err != nil {
			t.Fatal(err)
		}
		if node.Labels["team"] != "web" || len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "dedicated" || node.Status.NodeInfo.KubeletVersion != "v1.37.2" {
			t.Errorf("node %s: labels %v, taints %v, kubelet %s", node.Name, node.Labels, node.Spec.Taints, node.Status.NodeInfo.KubeletVersion)
		}
		// The join data came from Cluster API's real kubeadm bootstrap provider, with a bootstrap
		// token it made in the customer's cluster.
		tokens := &corev1.SecretList{}
		if err := customer.List(ctx, tokens, client.InNamespace("kube-system")); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range tokens.Items {
			found = found || s.Type == corev1.SecretTypeBootstrapToken
		}
		if !found {
			t.Error("no bootstrap token in the customer's kube-system")
		}
		ready := clusterCondition(t, kc, clusterapi.WorkersReadyCondition)
		clusterCondition(t, kc, clusterapi.InfrastructureReadyCondition)
		clusterCondition(t, kc, "Ready")
		if len(ready.Status.NodeGroups) != 1 || ready.Status.NodeGroups[0].Ready != 2 {
			t.Errorf("node groups %+v", ready.Status.NodeGroups)
		}
	})

	t.Run("add-ons are installed inside the customer's cluster by Flux's helm-controller", func(t *testing.T) {
		clusterCondition(t, kc, clusterapi.AddonsReadyCondition)
		cm := &corev1.ConfigMap{}
		if err := customer.Get(ctx, client.ObjectKey{Namespace: "flotilla-ingress", Name: "ingress-settings"}, cm); err != nil {
			t.Fatalf("the ingress add-on's ConfigMap in the customer's cluster: %v", err)
		}
		if n := etcdKeys(t, "/acme_prod/configmaps/flotilla-ingress/"); n != 1 {
			t.Errorf("%d keys of the add-on's ConfigMap under the cluster's prefix", n)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "flotilla-ingress"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("the add-on landed in the management cluster: %v", err)
		}
		// The base add-ons come without being asked for: the CNI with the cluster's networks, the
		// CSI node plugin with where the cluster's volumes are in the platform, and no credential.
		if err := customer.Get(ctx, client.ObjectKey{Namespace: "flotilla-cni", Name: "flannel-config"}, cm); err != nil ||
			!strings.Contains(cm.Data["net-conf.json"], `"Network": "`+cluster.DefaultOptions().PodCIDR+`"`) {
			t.Errorf("the CNI add-on's network in the customer's cluster: %v %v", cm.Data, err)
		}
		for _, ds := range []client.ObjectKey{{Namespace: "flotilla-cni", Name: "flannel"}, {Namespace: "flotilla-csi-node", Name: "kubevirt-csi-node"}} {
			if err := customer.Get(ctx, ds, &appsv1.DaemonSet{}); err != nil {
				t.Errorf("the base add-on's DaemonSet %s in the customer's cluster: %v", ds, err)
			}
		}
		if err := customer.Get(ctx, client.ObjectKey{Name: "csi.kubevirt.io"}, &storagev1.CSIDriver{}); err != nil {
			t.Errorf("the CSI node plugin's CSIDriver in the customer's cluster: %v", err)
		}
		if err := customer.Get(ctx, client.ObjectKey{Namespace: "flotilla-csi-node", Name: "driver-config"}, cm); err != nil ||
			cm.Data["infraClusterNamespace"] != "acme" || !strings.Contains(cm.Data["infraClusterLabels"], "cluster.x-k8s.io/cluster-name=prod") ||
			!strings.Contains(cm.Data["infraClusterLabels"], "cluster.flotilla.dev/cluster-uid="+string(kc.UID)) {
			t.Errorf("the CSI node plugin's configuration in the customer's cluster: %v %v", cm.Data, err)
		}
		// Installed as the add-ons' identity, which Cluster API's ClusterResourceSet bound inside.
		crb := &rbacv1.ClusterRoleBinding{}
		if err := customer.Get(ctx, client.ObjectKey{Name: "flotilla:addons"}, crb); err != nil || len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != "acme" {
			t.Errorf("the add-ons' binding inside: %+v, %v", crb.Subjects, err)
		}
	})

	t.Run("Cluster API's changes to the owned objects do not make the controller re-apply them", func(t *testing.T) {
		// Cluster API has added its finalizers, owner references, labels and status by now; a
		// reconcile of the cluster must find every owned object converged.
		n, a := reconciles.Load(), applies.Load()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &clusterapi.KubernetesCluster{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(kc), got); err != nil {
				return err
			}
			got.Annotations = map[string]string{"poke": "1"}
			return k8s.Update(ctx, got)
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a reconcile after the poke", func() (bool, error) { return reconciles.Load() > n, nil })
		if got := applies.Load() - a; got != 0 {
			t.Errorf("%d owned objects re-applied beside Cluster API", got)
		}
	})

	t.Run("a restarted stand-in serves the same control plane at the same endpoint", func(t *testing.T) {
		before := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "prod-kubeconfig"}, before); err != nil {
			t.Fatal(err)
		}
		stopProvider()
		if out, err := kubectl(t, kubeconfig, "get", "ns", "--request-timeout=2s"); err == nil {
			t.Fatalf("the control plane answers with its provider stopped:\n%s", out)
		}
		stopProvider = runProvider(t, "acme", state)
		eventually(t, "the customer's API server back", func() (bool, error) {
			out, err := kubectl(t, kubeconfig, "get", "ns", "shop", "-o", "name", "--request-timeout=2s")
			return err == nil && strings.TrimSpace(out) == "namespace/shop", nil
		})
		after := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "prod-kubeconfig"}, after); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Error("the restarted stand-in rewrote the kubeconfig")
		}
		clusterCondition(t, kc, "Ready")
	})

	t.Run("scaling the node group adds a Node", func(t *testing.T) {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &clusterapi.KubernetesCluster{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(kc), got); err != nil {
				return err
			}
			got.Spec.NodeGroups[0].MinReplicas = 3
			return k8s.Update(ctx, got)
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "three Ready Nodes", func() (bool, error) { return len(readyNodes(t, customer)) == 3, nil })
		eventually(t, "WorkersReady 3/3", func() (bool, error) {
			got := clusterCondition(t, kc, clusterapi.WorkersReadyCondition)
			return len(got.Status.NodeGroups) == 1 && got.Status.NodeGroups[0].Ready == 3, nil
		})
	})

	t.Run("losing every worker leaves the control plane, and the cluster recovers", func(t *testing.T) {
		before, _ := machines(t, "acme", "default")
		old := map[string]bool{}
		for _, m := range before {
			old[m.GetName()] = true
			if err := k8s.Delete(ctx, &m); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the lost workers' Nodes gone from the customer's cluster", func() (bool, error) {
			for _, n := range readyNodes(t, customer) {
				if old[n] {
					return false, nil
				}
			}
			return true, nil
		})
		// The control plane never went away: the customer's API answers throughout.
		if out, err := kubectl(t, kubeconfig, "get", "ns", "shop", "-o", "name"); err != nil {
			t.Fatalf("kubectl get ns shop without workers: %v\n%s", err, out)
		}
		eventually(t, "three new Running Machines", func() (bool, error) {
			all, running := machines(t, "acme", "default")
			for _, m := range all {
				if old[m.GetName()] {
					return false, nil
				}
			}
			return running == 3, nil
		})
		if nodes := readyNodes(t, customer); len(nodes) != 3 {
			t.Errorf("Ready nodes after recovery: %v", nodes)
		}
		clusterCondition(t, kc, "Ready")
	})

	t.Run("deletion goes through Cluster API's teardown and stops the control plane", func(t *testing.T) {
		// The add-on's objects must be deleted from the customer's cluster while its control
		// plane still runs: watched from before the deletion.
		addon := watchConfigMaps(t, kubeconfig, "flotilla-ingress")
		if err := k8s.Delete(ctx, kc); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the cluster gone", func() (bool, error) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(kc), &clusterapi.KubernetesCluster{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		for _, gvk := range []schema.GroupVersionKind{machineGVK, machineSetGVK, cluster.MachineDeploymentGVK, cluster.ClusterGVK, cluster.KamajiControlPlaneGVK, localprovider.KubevirtMachineGVK, cluster.HelmReleaseGVK} {
			if left := list(t, gvk, "acme", nil); len(left) > 0 {
				t.Errorf("%s %s left behind", gvk.Kind, left[0].GetName())
			}
		}
		// helm-controller uninstalled the add-on from the customer's cluster before its control
		// plane went, and the control plane's data went from the tenant's etcd with it.
		if deleted := addon(); !deleted["ingress-settings"] {
			t.Errorf("the add-on was not uninstalled before the control plane went: deleted %v", deleted)
		}
		eventually(t, "the control plane's keys gone from etcd", func() (bool, error) {
			return etcdKeys(t, "/acme_prod/") == 0, nil
		})
		eventually(t, "the control plane's kube-apiserver stopped", func() (bool, error) {
			_, err := kubectl(t, kubeconfig, "get", "ns", "--request-timeout=2s")
			_, statErr := os.Stat(filepath.Join(state, "acme", cluster.ControlPlaneName("prod")))
			return err != nil && os.IsNotExist(statErr), nil
		})
	})
}
