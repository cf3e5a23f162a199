package kubernetescluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/ssa"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// The infrastructure namespace's objects are the chart's Role there, not a cluster-wide grant:
// these markers only let the controller bind its clusters' identities in the tenants' namespaces.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=flotilla-cluster-infra

// reconcileInfraKubeconfig copies the cluster's admin kubeconfig (verified by reconcileKubeconfig)
// into the infrastructure namespace, where the cluster's controllers mount it. Its Deployments,
// ServiceAccount and cloud-config are among the desired objects.
func (r *Reconciler) reconcileInfraKubeconfig(ctx context.Context, s *scope) error {
	kc := s.kc
	if r.Options.InfraNamespace == "" || !s.kubeconfig() {
		return nil
	}
	m := cluster.InfraMeta(kc, r.Options.InfraNamespace, cluster.InfraKubeconfigSecret(kc.Namespace, kc.Name))
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	live := &corev1.Secret{}
	switch err := r.Get(ctx, key, live); {
	case err == nil && !controlledBy(live, kc):
		msg := fmt.Sprintf("Secret %s exists and was not created by this cluster: it is left alone; delete it", key)
		s.stallOn(clusterapi.CloudControllersReadyCondition, clusterapi.ConflictReason, msg)
		return nil
	case client.IgnoreNotFound(err) != nil:
		return err
	}
	desired := corev1ac.Secret(m.Name, m.Namespace).WithLabels(m.Labels).WithAnnotations(m.Annotations).
		WithType(corev1.SecretTypeOpaque).WithData(map[string][]byte{"value": s.adminKubeconfig})
	if _, err := ssa.Apply(ctx, r.Client, r.Client, key, &corev1.Secret{}, desired, corev1ac.ExtractSecret, FieldOwner); err != nil {
		conditions.MarkFalse(kc, clusterapi.CloudControllersReadyCondition, clusterapi.ApplyFailedReason, err.Error())
		return err
	}
	return nil
}

// setCloudControllersReady counts the infrastructure controllers whose Deployment is available at
// its current generation, all replicas updated.
func setCloudControllersReady(kc *clusterapi.KubernetesCluster, kubeconfig bool, namespace string, deployments []unstructured.Unstructured) {
	if !kubeconfig {
		conditions.MarkFalse(kc, clusterapi.CloudControllersReadyCondition, clusterapi.WaitingReason,
			"waiting for the control plane's admin kubeconfig, which the controllers use")
		return
	}
	byName := map[string]*unstructured.Unstructured{}
	for i := range deployments {
		byName[deployments[i].GetName()] = &deployments[i]
	}
	stem := cluster.InfraName(kc.Namespace, kc.Name)
	ready, waiting := 0, []string{}
	for _, c := range cluster.InfraControllers {
		d := byName[stem+"-"+c]
		switch {
		case d == nil:
			waiting = append(waiting, c+": not created yet")
		case !current_(d):
			waiting = append(waiting, c+": waiting for its Deployment to observe the change")
		case !deploymentAvailable(d):
			waiting = append(waiting, fmt.Sprintf("%s: %d/%d replicas available", c, num(d, "status", "availableReplicas"), num(d, "spec", "replicas")))
		default:
			ready++
		}
	}
	msg := fmt.Sprintf("%d/%d of %s available in namespace %s", ready, len(cluster.InfraControllers), strings.Join(cluster.InfraControllers, ", "), namespace)
	if len(waiting) == 0 {
		conditions.MarkTrue(kc, clusterapi.CloudControllersReadyCondition, clusterapi.ReconciledReason, msg)
		return
	}
	conditions.MarkFalse(kc, clusterapi.CloudControllersReadyCondition, clusterapi.ProgressingReason, msg+"; "+strings.Join(waiting, "; "))
}

// deploymentAvailable: the Deployment reports Available and every replica updated (its status
// conditions carry no generation of their own: status.observedGeneration, checked before, does).
func deploymentAvailable(d *unstructured.Unstructured) bool {
	if num(d, "status", "updatedReplicas") != num(d, "spec", "replicas") {
		return false
	}
	list, _, _ := unstructured.NestedSlice(d.Object, "status", "conditions")
	for _, item := range list {
		if c, _ := item.(map[string]any); c["type"] == "Available" {
			return c["status"] == "True"
		}
	}
	return false
}
