package capitest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

var (
	machineSetGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineSet"}
	machineGVK    = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
)

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
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

// standIn writes status as a provider would, on the object's current generation.
func standIn(t *testing.T, gvk schema.GroupVersionKind, ns, name string, change func(u *unstructured.Unstructured), status func(u *unstructured.Unstructured) map[string]any) {
	t.Helper()
	eventually(t, gvk.Kind+" "+name+" by the provider stand-in", func() (bool, error) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
				return err
			}
			if change != nil {
				change(u)
				if err := k8s.Update(context.Background(), u); err != nil {
					return err
				}
			}
			u.Object["status"] = status(u)
			return k8s.Status().Update(context.Background(), u)
		})
		return err == nil, err
	})
}

// Cluster API's own controllers turn the cluster-controller's MachineDeployment into a MachineSet
// and Machines, of the templates the cluster-controller wrote; the CAPI Cluster's
// InfrastructureReady, written by CAPI from the KubevirtCluster, becomes the cluster's.
func TestClusterAPIMakesTheMachines(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme", Labels: map[string]string{tenancyv1.LabelEtcd: "acme"}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	kc := &clusterapi.KubernetesCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "acme"},
		Spec: clusterapi.KubernetesClusterSpec{Version: "1.37", ControlPlane: clusterapi.ControlPlane{Replicas: 1},
			NodeGroups: []clusterapi.NodeGroup{{Name: "default", MinReplicas: 2, MaxReplicas: 4, InstanceType: "small"}}},
	}
	if err := k8s.Create(ctx, kc); err != nil {
		t.Fatal(err)
	}

	// CAPK's stand-in: the infrastructure is provisioned (CAPK v1alpha1 reports status.ready).
	standIn(t, cluster.KubevirtClusterGVK, "acme", "prod", nil, func(*unstructured.Unstructured) map[string]any {
		return map[string]any{"ready": true, "initialization": map[string]any{"provisioned": true}}
	})
	// Kamaji's stand-in: the hosted control plane is up at an endpoint, running v1.37.2.
	standIn(t, cluster.KamajiControlPlaneGVK, "acme", cluster.ControlPlaneName("prod"), func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedMap(u.Object, map[string]any{"host": "prod.acme.k8s.example", "port": int64(6443)}, "spec", "controlPlaneEndpoint")
	}, func(u *unstructured.Unstructured) map[string]any {
		return map[string]any{"version": "v1.37.2", "ready": true, "replicas": int64(1), "readyReplicas": int64(1), "availableReplicas": int64(1), "upToDateReplicas": int64(1),
			"initialization": map[string]any{"controlPlaneInitialized": true},
			"conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "StandIn", "message": "",
				"observedGeneration": u.GetGeneration(), "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}
	})

	md := cluster.MachineDeploymentName("prod", "default")
	eventually(t, "Cluster API's MachineSet of "+md, func() (bool, error) {
		return len(list(t, machineSetGVK, "acme", map[string]string{"cluster.x-k8s.io/deployment-name": md})) == 1, nil
	})
	var machines []unstructured.Unstructured
	eventually(t, "two Machines of node group default, made by Cluster API", func() (bool, error) {
		machines = list(t, machineGVK, "acme", map[string]string{clusterapi.LabelNodeGroup: "default"})
		return len(machines) == 2, nil
	})
	for _, m := range machines {
		infra, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "kind")
		boot, _, _ := unstructured.NestedString(m.Object, "spec", "bootstrap", "configRef", "kind")
		version, _, _ := unstructured.NestedString(m.Object, "spec", "version")
		if infra != "KubevirtMachine" || boot != "KubeadmConfig" || version != "v1.37.2" {
			t.Errorf("machine %s: infrastructure %s, bootstrap %s, version %s", m.GetName(), infra, boot, version)
		}
	}
	eventually(t, "InfrastructureReady from Cluster API's Cluster", func() (bool, error) {
		got := &clusterapi.KubernetesCluster{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kc), got); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, clusterapi.InfrastructureReadyCondition), nil
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

	t.Run("deletion goes through Cluster API's own teardown", func(t *testing.T) {
		if err := k8s.Delete(ctx, kc); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the cluster gone", func() (bool, error) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(kc), &clusterapi.KubernetesCluster{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		for _, gvk := range []schema.GroupVersionKind{machineGVK, machineSetGVK, cluster.MachineDeploymentGVK, cluster.ClusterGVK, cluster.KamajiControlPlaneGVK} {
			if left := list(t, gvk, "acme", nil); len(left) > 0 {
				t.Errorf("%s %s left behind", gvk.Kind, left[0].GetName())
			}
		}
	})
}
