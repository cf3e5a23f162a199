package integration_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

// Every field a tenant can get wrong is refused at the API, with the field named.
func TestBadClustersAreRefused(t *testing.T) {
	ns := tenantNamespace(t, "validation", "validation")
	for _, tc := range []struct {
		name   string
		change func(*clusterapi.KubernetesCluster)
		field  string
	}{
		{"min above max", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].MinReplicas = 4 }, "minReplicas must not exceed maxReplicas"},
		{"max above 100", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].MaxReplicas = 101 }, "spec.nodeGroups[0].maxReplicas"},
		{"no node group", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups = nil }, "spec.nodeGroups"},
		{"duplicate node group", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups = append(kc.Spec.NodeGroups, kc.Spec.NodeGroups[0])
		}, "spec.nodeGroups[1]"},
		{"node group name", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].Name = "Default;" }, "spec.nodeGroups[0].name"},
		{"instance type", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].InstanceType = "huge" }, "spec.nodeGroups[0].instanceType"},
		{"instance type and cpu", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].CPU = ptr.To[int32](2)
			kc.Spec.NodeGroups[0].Memory = ptr.To(resource.MustParse("4Gi"))
		}, "set either instanceType or cpu and memory"},
		{"cpu without memory", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].InstanceType = ""
			kc.Spec.NodeGroups[0].CPU = ptr.To[int32](2)
		}, "cpu and memory go together"},
		{"tiny memory", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].InstanceType = ""
			kc.Spec.NodeGroups[0].CPU = ptr.To[int32](2)
			kc.Spec.NodeGroups[0].Memory = ptr.To(resource.MustParse("512Mi"))
		}, "spec.nodeGroups[].memory"},
		{"tiny disk", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].DiskSize = ptr.To(resource.MustParse("1Gi"))
		}, "spec.nodeGroups[].diskSize"},
		{"storage class", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].StorageClass = "Fast_SSD" }, "spec.nodeGroups[0].storageClass"},
		{"reserved label", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].Labels = map[string]clusterapi.LabelValue{"node-role.kubernetes.io/control-plane": ""}
		}, "keys under kubernetes.io and k8s.io are reserved"},
		{"label value", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].Labels = map[string]clusterapi.LabelValue{"team": "a b"}
		}, "spec.nodeGroups[0].labels.team"},
		{"taint effect", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].Taints = []clusterapi.Taint{{Key: "gpu", Effect: "Sometimes"}}
		}, "spec.nodeGroups[0].taints[0].effect"},
		{"gpu device", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.NodeGroups[0].GPUs = []clusterapi.GPU{{DeviceName: "../../dev/mem"}}
		}, "spec.nodeGroups[0].gpus[0].deviceName"},
		{"version", func(kc *clusterapi.KubernetesCluster) { kc.Spec.Version = "v1.37.0" }, "spec.version"},
		{"control plane replicas", func(kc *clusterapi.KubernetesCluster) { kc.Spec.ControlPlane.Replicas = 5 }, "spec.controlPlane.replicas"},
		{"control plane memory", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.ControlPlane.Resources = &clusterapi.ControlPlaneResources{Memory: ptr.To(resource.MustParse("64Mi"))}
		}, "spec.controlPlane.resources.memory"},
		{"scheduling class", func(kc *clusterapi.KubernetesCluster) { kc.Spec.SchedulingClass = "Gold Class" }, "spec.schedulingClass"},
		{"kubeconfig secret", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.KubeconfigSecretRef = &clusterapi.LocalSecretReference{Name: "../kube-system/admin"}
		}, "spec.kubeconfigSecretRef.name"},
		{"long name", func(kc *clusterapi.KubernetesCluster) { kc.Name = strings.Repeat("a", 41) }, "metadata.name"},
		{"name starting with a digit", func(kc *clusterapi.KubernetesCluster) { kc.Name = "1st" }, "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := makeCluster(ns, "bad").obj()
			tc.change(kc)
			err := k8s.Create(context.Background(), kc)
			if err == nil {
				_ = k8s.Delete(context.Background(), kc)
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("the error does not name %s: %v", tc.field, err)
			}
		})
	}
}

// Changes a tenant may not make to a running cluster are refused too.
func TestBadChangesAreRefused(t *testing.T) {
	// No etcd serves this namespace: the controller stalls and leaves the status below alone.
	ns := tenantNamespace(t, "validation-changes", "")
	create(t, makeCluster(ns, "prod").group(clusterapi.NodeGroup{Name: "batch", MinReplicas: 0, MaxReplicas: 2, InstanceType: "small"}).obj())
	// As the controller will have reported it: the default group has machines, batch has none.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		kc := get(t, ns, "prod")
		kc.Status.NodeGroups = []clusterapi.NodeGroupStatus{{Name: "default", Desired: 1, Replicas: 1, Ready: 1}, {Name: "batch"}}
		return k8s.Status().Update(context.Background(), kc)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*clusterapi.KubernetesCluster)
		field  string
	}{
		{"downgrade", func(kc *clusterapi.KubernetesCluster) { kc.Spec.Version = "1.36" }, "spec.version cannot be downgraded"},
		{"two minors up", func(kc *clusterapi.KubernetesCluster) { kc.Spec.Version = "1.39" }, "spec.version may move up one minor version at a time"},
		{"rename a group with machines", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups[0].Name = "workers" }, "spec.nodeGroups: a node group that still has machines"},
		{"remove a group with machines", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups = kc.Spec.NodeGroups[1:] }, "spec.nodeGroups: a node group that still has machines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := update(t, ns, "prod", tc.change)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("the error does not name %s: %v", tc.field, err)
			}
		})
	}
	t.Run("one minor up and removing an empty group are fine", func(t *testing.T) {
		if err := update(t, ns, "prod", func(kc *clusterapi.KubernetesCluster) {
			kc.Spec.Version = "1.38"
			kc.Spec.NodeGroups = kc.Spec.NodeGroups[:1]
		}); err != nil {
			t.Fatal(err)
		}
	})
}
