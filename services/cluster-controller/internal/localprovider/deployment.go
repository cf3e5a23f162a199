package localprovider

import (
	"context"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

// reconcilePod plays the kubelet of an infrastructure pod bound to a Node no kubelet runs (one
// made by hand, which reports no kubelet version): its containers report running and ready, so
// that kube-controller-manager's controllers count it available. A pod on a real node is its
// kubelet's.
func (p *Provider) reconcilePod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := p.Client.Get(ctx, req.NamespacedName, pod); err != nil || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	node := &corev1.Node{}
	if err := p.Client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if node.Status.NodeInfo.KubeletVersion != "" || pod.Status.Phase == corev1.PodRunning {
		return reconcile.Result{}, nil
	}
	now := metav1.Now()
	st := &pod.Status
	st.Phase, st.StartTime, st.ContainerStatuses = corev1.PodRunning, &now, nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	played := []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady}
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c corev1.PodCondition) bool { return slices.Contains(played, c.Type) })
	for _, t := range played {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now,
			Reason: "LocalProviderStandIn", Message: "The local provider stand-in plays the kubelet: no container runs"})
	}
	return reconcile.Result{}, p.Client.Status().Update(ctx, pod)
}
