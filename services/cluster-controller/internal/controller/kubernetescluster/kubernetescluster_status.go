package kubernetescluster

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// reconcileStatus derives the domain conditions from the owned objects' own reports, each only
// when the report is about the object's current generation.
func (r *Reconciler) reconcileStatus(ctx context.Context, s *scope) error {
	kc := s.kc
	capiCluster, err := r.owned(ctx, kc, cluster.ClusterGVK, kc.Name)
	if err != nil {
		return err
	}
	kcp, err := r.owned(ctx, kc, cluster.KamajiControlPlaneGVK, cluster.ControlPlaneName(kc.Name))
	if err != nil {
		return err
	}
	mds, err := r.machineDeployments(ctx, kc)
	if err != nil {
		return err
	}
	releases, err := r.ownedList(ctx, kc, cluster.HelmReleaseGVK)
	if err != nil {
		return err
	}
	setInfrastructureReady(kc, capiCluster)
	setControlPlaneReady(kc, kcp, s.kubeconfig())
	setWorkersReady(kc, mds)
	setAddonsReady(kc, cluster.Addons(kc, r.Options), releases)
	if r.Options.InfraNamespace != "" {
		deployments, err := r.ownedList(ctx, kc, cluster.DeploymentGVK)
		if err != nil {
			return err
		}
		setCloudControllersReady(kc, s.kubeconfig(), r.Options.InfraNamespace, deployments)
	}
	return nil
}

// setInfrastructureReady mirrors the CAPI Cluster's InfrastructureReady (its copy of the
// KubevirtCluster's readiness).
func setInfrastructureReady(kc *clusterapi.KubernetesCluster, c *unstructured.Unstructured) {
	ok, reported, msg := conditionCurrent(c, "InfrastructureReady")
	if ok {
		conditions.MarkTrue(kc, clusterapi.InfrastructureReadyCondition, clusterapi.ReconciledReason, "The infrastructure of the cluster is ready")
		return
	}
	conditions.MarkFalse(kc, clusterapi.InfrastructureReadyCondition, reasonOf(reported), "Cluster: "+msg)
}

// setControlPlaneReady mirrors the KamajiControlPlane's Available condition, and requires it to
// run the version asked for; the endpoint and version come from it too.
func setControlPlaneReady(kc *clusterapi.KubernetesCluster, kcp *unstructured.Unstructured, kubeconfig bool) {
	if kcp != nil {
		if host, _, _ := unstructured.NestedString(kcp.Object, "spec", "controlPlaneEndpoint", "host"); host != "" {
			port, _, _ := unstructured.NestedInt64(kcp.Object, "spec", "controlPlaneEndpoint", "port")
			kc.Status.Endpoint = fmt.Sprintf("https://%s:%d", host, port)
		}
		if v, _, _ := unstructured.NestedString(kcp.Object, "status", "version"); v != "" {
			kc.Status.Version = v
		}
	}
	ok, reported, msg := conditionCurrent(kcp, "Available")
	if ok {
		want, _, _ := unstructured.NestedString(kcp.Object, "spec", "version")
		if kc.Status.Version != want {
			ok, msg = false, fmt.Sprintf("upgrading from %s to %s", kc.Status.Version, want)
		}
	}
	if ok && !kubeconfig {
		ok, msg = false, "waiting for the control plane's admin kubeconfig (Secret "+kc.Name+"-kubeconfig)"
	}
	if ok {
		conditions.MarkTrue(kc, clusterapi.ControlPlaneReadyCondition, clusterapi.ReconciledReason, "The control plane is available at "+kc.Status.Endpoint)
		return
	}
	conditions.MarkFalse(kc, clusterapi.ControlPlaneReadyCondition, reasonOf(reported), "KamajiControlPlane: "+msg)
}

// setWorkersReady counts ready machines against desired per node group, from MachineDeployment
// status that is about the current generation.
func setWorkersReady(kc *clusterapi.KubernetesCluster, mds []unstructured.Unstructured) {
	byGroup := map[string]*unstructured.Unstructured{}
	for i := range mds {
		byGroup[mds[i].GetLabels()[clusterapi.LabelNodeGroup]] = &mds[i]
	}
	kc.Status.NodeGroups = nil
	ready, parts := true, make([]string, 0, len(kc.Spec.NodeGroups))
	for _, g := range kc.Spec.NodeGroups {
		md := byGroup[g.Name]
		st := clusterapi.NodeGroupStatus{Name: g.Name}
		if md == nil {
			ready = false
			parts = append(parts, g.Name+" not created")
			kc.Status.NodeGroups = append(kc.Status.NodeGroups, st)
			continue
		}
		st.Desired = int32(num(md, "spec", "replicas"))
		st.Replicas = int32(num(md, "status", "replicas"))
		st.Ready = int32(num(md, "status", "readyReplicas"))
		upToDate := int32(num(md, "status", "upToDateReplicas"))
		kc.Status.NodeGroups = append(kc.Status.NodeGroups, st)
		switch {
		case !current_(md):
			ready = false
			parts = append(parts, g.Name+" waiting for its MachineDeployment to observe the change")
		case st.Ready != st.Desired || st.Replicas != st.Desired || upToDate != st.Desired:
			ready = false
			parts = append(parts, fmt.Sprintf("%s %d/%d ready", g.Name, st.Ready, st.Desired))
		default:
			parts = append(parts, fmt.Sprintf("%s %d/%d ready", g.Name, st.Ready, st.Desired))
		}
	}
	msg := strings.Join(parts, ", ")
	if ready {
		conditions.MarkTrue(kc, clusterapi.WorkersReadyCondition, clusterapi.ReconciledReason, msg)
		return
	}
	conditions.MarkFalse(kc, clusterapi.WorkersReadyCondition, clusterapi.ProgressingReason, msg)
}

// conditionCurrent reports whether obj's condition of type t is True about obj's current
// generation, whether it is about the current generation at all, and else what it waits for.
// (KamajiControlPlane's status has no observedGeneration: its conditions' tell.)
func conditionCurrent(obj *unstructured.Unstructured, t string) (ok, reported bool, msg string) {
	if obj == nil {
		return false, false, "not created yet"
	}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range list {
		c, _ := item.(map[string]any)
		if c["type"] != t {
			continue
		}
		if g, _, _ := unstructured.NestedInt64(c, "observedGeneration"); g != obj.GetGeneration() {
			return false, false, fmt.Sprintf("%s has not been reported for generation %d yet", t, obj.GetGeneration())
		}
		msg, _ := c["message"].(string)
		if c["status"] != string(metav1.ConditionTrue) {
			return false, true, fmt.Sprintf("%s is %v: %s", t, c["status"], msg)
		}
		return true, true, msg
	}
	return false, false, t + " not reported yet"
}

func reasonOf(reported bool) string {
	if !reported {
		return clusterapi.WaitingReason
	}
	return clusterapi.ProgressingReason
}

// current_ reports whether obj's status is about its current generation.
func current_(obj *unstructured.Unstructured) bool {
	return num(obj, "status", "observedGeneration") == obj.GetGeneration()
}

func num(obj *unstructured.Unstructured, path ...string) int64 {
	n, _, _ := unstructured.NestedInt64(obj.Object, path...)
	return n
}
