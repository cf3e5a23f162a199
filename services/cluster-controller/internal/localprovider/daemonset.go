package localprovider

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// reconcileAddon plays, for one add-on HelmRelease, the customer cluster's DaemonSet controller and
// the kubelets of its nodes: each DaemonSet of the add-on's namespace reports a pod ready on every
// Node of the cluster, at its current generation, so that helm-controller's wait for the release
// ends as it would where the pods run. No container runs. While the release is not Ready it looks
// again each second: the DaemonSets appear during helm-controller's install.
func (p *Provider) reconcileAddon(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	hr := object(cluster.HelmReleaseGVK)
	if err := p.Client.Get(ctx, req.NamespacedName, hr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	clusterName := hr.GetLabels()[clusterv1.ClusterNameLabel]
	target, _, _ := unstructured.NestedString(hr.Object, "spec", "targetNamespace")
	if clusterName == "" || target == "" || hr.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	again := reconcile.Result{RequeueAfter: time.Second}
	if ready(hr) {
		again = reconcile.Result{}
	}
	customer, err := p.customer(ctx, hr.GetNamespace(), clusterName)
	if err != nil || customer == nil {
		return reconcile.Result{RequeueAfter: time.Second}, err
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := customer.List(ctx, nodes); err != nil {
		return reconcile.Result{}, err
	}
	n := int32(len(nodes.Items))
	sets := &appsv1.DaemonSetList{}
	if err := customer.List(ctx, sets, client.InNamespace(target)); err != nil {
		return reconcile.Result{}, err
	}
	for i := range sets.Items {
		ds := &sets.Items[i]
		want := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: n, CurrentNumberScheduled: n,
			UpdatedNumberScheduled: n, NumberReady: n, NumberAvailable: n}
		if equality.Semantic.DeepEqual(ds.Status, want) {
			continue
		}
		ds.Status = want
		if err := customer.Status().Update(ctx, ds); err != nil {
			return reconcile.Result{}, err
		}
	}
	return again, nil
}

// ready says whether an object's status holds the condition Ready=True.
func ready(u *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}
