package integration_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// A Ready cluster loses a node group, and kube-apiserver refuses the deletion of its
// MachineDeployment: every reconcile of the new generation fails after applying the owned
// objects, before the domain conditions are evaluated again from their reports. kstatus, the
// judge of Flux, kubectl wait and Argo CD, must not call the cluster Current for that generation;
// once the deletion is admitted, it is.
func TestAFailedReconcileIsNeverReadyForTheNewSpec(t *testing.T) {
	ctx := context.Background()
	ns := tenantNamespace(t, "refused", "refused")
	create(t, makeCluster(ns, "prune").group(clusterapi.NodeGroup{Name: "gpu", MinReplicas: 0, MaxReplicas: 2, InstanceType: "large"}).obj())
	if s := testenv.KStatusOf(t, ready(t, ns, "prune")); s != kstatus.CurrentStatus {
		t.Fatalf("a Ready cluster: kstatus %s", s)
	}

	const message = "the test refuses to delete this MachineDeployment"
	lift, err := testenv.Refuse(ctx, k8s, "test-refuse-machinedeployment-deletion", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{cluster.MachineDeploymentGVK.Group}, APIVersions: []string{"*"},
			Resources: []string{"machinedeployments"}},
	}, "oldObject.metadata.namespace == '"+ns+"' && oldObject.metadata.name == 'prune-gpu'", message, func(ctx context.Context) error {
		md := &unstructured.Unstructured{}
		md.SetGroupVersionKind(cluster.MachineDeploymentGVK)
		md.SetNamespace(ns)
		md.SetName("prune-gpu")
		return k8s.Delete(ctx, md, client.DryRunAll)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lift(context.Background()) })

	if err := update(t, ns, "prune", func(kc *clusterapi.KubernetesCluster) { kc.Spec.NodeGroups = kc.Spec.NodeGroups[:1] }); err != nil {
		t.Fatal(err)
	}
	// A reconcile of the new generation wrote its verdict once Ready is about that generation.
	var kc *clusterapi.KubernetesCluster
	eventually(t, "a verdict on the new generation", func() (bool, error) {
		kc = get(t, ns, "prune")
		c := meta.FindStatusCondition(kc.Status.Conditions, fmeta.ReadyCondition)
		return len(kc.Spec.NodeGroups) == 1 && c != nil && c.ObservedGeneration == kc.Generation, nil
	})
	for range 10 { // and so it stays while the reconciles fail
		if s := testenv.KStatusOf(t, kc); s != kstatus.InProgressStatus {
			t.Fatalf("generation %d, its reconciles failing: kstatus %s, want %s (observedGeneration %d, %+v)",
				kc.Generation, s, kstatus.InProgressStatus, kc.Status.ObservedGeneration, kc.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
		kc = get(t, ns, "prune")
	}
	if object(t, cluster.MachineDeploymentGVK, ns, "prune-gpu") == nil {
		t.Fatal("the MachineDeployment was deleted although kube-apiserver refuses it")
	}

	if err := lift(ctx); err != nil {
		t.Fatal(err)
	}
	kc = condition(t, ns, "prune", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if s := testenv.KStatusOf(t, kc); s != kstatus.CurrentStatus {
		t.Errorf("the new generation reconciled: kstatus %s", s)
	}
	if object(t, cluster.MachineDeploymentGVK, ns, "prune-gpu") != nil {
		t.Error("the removed node group's MachineDeployment is still there")
	}
}
