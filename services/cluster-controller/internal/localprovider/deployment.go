package localprovider

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// reconcileDeployment plays kube-controller-manager's Deployment controller and the kubelets for
// a cluster's infrastructure controllers (in Options.InfraNamespace): their Deployment reports
// every replica of its current generation updated and available. No container runs.
func (p *Provider) reconcileDeployment(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	d := &appsv1.Deployment{}
	if err := p.Client.Get(ctx, req.NamespacedName, d); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	n := int32(1)
	if d.Spec.Replicas != nil {
		n = *d.Spec.Replicas
	}
	st := &d.Status
	available := -1
	for i, c := range st.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			available = i
		}
	}
	if st.ObservedGeneration == d.Generation && st.UpdatedReplicas == n && st.AvailableReplicas == n && st.Replicas == n &&
		available >= 0 && st.Conditions[available].Status == corev1.ConditionTrue {
		return reconcile.Result{}, nil
	}
	st.ObservedGeneration = d.Generation
	st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas = n, n, n, n
	cond := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "LocalProviderStandIn",
		Message: "The local provider stand-in plays the kubelet: no container runs", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	if available >= 0 {
		st.Conditions[available] = cond
	} else {
		st.Conditions = append(st.Conditions, cond)
	}
	return reconcile.Result{}, p.Client.Status().Update(ctx, d)
}
