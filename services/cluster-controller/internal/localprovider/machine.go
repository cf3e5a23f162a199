package localprovider

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Finalizer keeps a KubevirtMachine until its VM is gone (its Node removed), as CAPK's does.
const Finalizer = "localprovider.cluster.flotilla.dev/vm"

// ProviderIDPrefix is how CAPK names a VM as a node's providerID.
const ProviderIDPrefix = "kubevirt://"

// reconcileMachine plays KubeVirt and the guest for one KubevirtMachine: once its Machine's
// bootstrap data exists, the VM "boots" — its Node registers in the customer's API server — and
// the KubevirtMachine reports ready with the providerID; deleting it removes the Node.
func (p *Provider) reconcileMachine(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kvm := object(KubevirtMachineGVK)
	if err := p.Client.Get(ctx, req.NamespacedName, kvm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	clusterName := kvm.GetLabels()[clusterv1.ClusterNameLabel]
	if kvm.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, p.shutDown(ctx, kvm, clusterName)
	}
	if controllerutil.AddFinalizer(kvm, Finalizer) {
		if err := p.Client.Update(ctx, kvm); err != nil {
			return ctrl.Result{}, err
		}
	}
	machine := p.ownerMachine(ctx, kvm)
	if machine == nil || clusterName == "" {
		return ctrl.Result{}, nil // Cluster API sets the owner and label; that change re-queues
	}
	// CAPK creates the VM only with the bootstrap data at hand; the guest boots from it.
	dataSecret, _, _ := unstructured.NestedString(machine.Object, "spec", "bootstrap", "dataSecretName")
	if dataSecret == "" {
		return ctrl.Result{}, nil // the Machine's change re-queues
	}
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: kvm.GetNamespace(), Name: dataSecret}, &corev1.Secret{}); err != nil {
		return ctrl.Result{RequeueAfter: time.Second}, client.IgnoreNotFound(err)
	}
	customer, err := p.customer(ctx, kvm.GetNamespace(), clusterName)
	if err != nil || customer == nil {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	providerID := ProviderIDPrefix + kvm.GetName()
	if err := p.registerNode(ctx, customer, kvm.GetName(), providerID, machine); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, p.machineReady(ctx, kvm, providerID)
}

// ownerMachine is the Cluster API Machine owning kvm, or nil.
func (p *Provider) ownerMachine(ctx context.Context, kvm *unstructured.Unstructured) *unstructured.Unstructured {
	for _, ref := range kvm.GetOwnerReferences() {
		if ref.Kind != MachineGVK.Kind || !strings.HasPrefix(ref.APIVersion, MachineGVK.Group+"/") {
			continue
		}
		m := object(MachineGVK)
		if err := p.Client.Get(ctx, types.NamespacedName{Namespace: kvm.GetNamespace(), Name: ref.Name}, m); err == nil {
			return m
		}
	}
	return nil
}

// registerNode is the guest's kubelet joining: a Ready Node of the VM's name with the providerID
// (which the KubeVirt cloud-controller-manager would set), the node labels and taints of the
// machine's KubeadmConfig, and the machine's Kubernetes version.
func (p *Provider) registerNode(ctx context.Context, customer client.Client, name, providerID string, machine *unstructured.Unstructured) error {
	labels, taints := p.joinConfiguration(ctx, machine)
	labels[corev1.LabelHostname] = name
	version, _, _ := unstructured.NestedString(machine.Object, "spec", "version")
	node := &corev1.Node{}
	switch err := customer.Get(ctx, types.NamespacedName{Name: name}, node); {
	case apierrors.IsNotFound(err):
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.NodeSpec{ProviderID: providerID, Taints: taints}}
		if err := customer.Create(ctx, node); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if c := nodeCondition(node, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue {
		return nil
	}
	// The customer's kube-controller-manager would lift the not-ready taint that admission put
	// on the new Node once it reports Ready; none runs here.
	if untainted := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }); len(untainted) != len(node.Spec.Taints) {
		node.Spec.Taints = untainted
		if err := customer.Update(ctx, node); err != nil {
			return err
		}
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		// What a kubelet reports: no pressure, and Ready (Cluster API's NodeHealthy reads all four).
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "local provider stand-in: the guest booted", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: version, Architecture: "amd64", OperatingSystem: "linux"},
	}
	return customer.Status().Update(ctx, node)
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// joinConfiguration reads the node labels (kubelet --node-labels) and taints the guest registers
// with from the machine's KubeadmConfig.
func (p *Provider) joinConfiguration(ctx context.Context, machine *unstructured.Unstructured) (map[string]string, []corev1.Taint) {
	labels := map[string]string{}
	name, _, _ := unstructured.NestedString(machine.Object, "spec", "bootstrap", "configRef", "name")
	cfg := object(KubeadmConfigGVK)
	if name == "" || p.Client.Get(ctx, types.NamespacedName{Namespace: machine.GetNamespace(), Name: name}, cfg) != nil {
		return labels, nil
	}
	reg, _, _ := unstructured.NestedMap(cfg.Object, "spec", "joinConfiguration", "nodeRegistration")
	var parsed struct {
		KubeletExtraArgs []struct{ Name, Value string }
		Taints           []corev1.Taint
	}
	if err := runtimeConvert(reg, &parsed); err != nil {
		return labels, nil
	}
	for _, arg := range parsed.KubeletExtraArgs {
		if arg.Name != "node-labels" {
			continue
		}
		for pair := range strings.SplitSeq(arg.Value, ",") {
			if k, v, ok := strings.Cut(pair, "="); ok {
				labels[k] = v
			}
		}
	}
	return labels, parsed.Taints
}

// machineReady reports the VM as CAPK does: spec.providerID, status.ready and its addresses.
func (p *Provider) machineReady(ctx context.Context, kvm *unstructured.Unstructured, providerID string) error {
	if id, _, _ := unstructured.NestedString(kvm.Object, "spec", "providerID"); id != providerID {
		patch := map[string]any{"spec": map[string]any{"providerID": providerID}}
		if err := p.Client.Patch(ctx, kvm, client.RawPatch(types.MergePatchType, mustJSON(patch))); err != nil {
			return err
		}
	}
	if ready, _, _ := unstructured.NestedBool(kvm.Object, "status", "ready"); ready {
		return nil
	}
	patch := map[string]any{"status": map[string]any{"ready": true, "nodeupdated": true,
		"addresses": []any{map[string]any{"type": "InternalIP", "address": "127.0.0.1"}, map[string]any{"type": "Hostname", "address": kvm.GetName()}}}}
	return p.Client.Status().Patch(ctx, kvm, client.RawPatch(types.MergePatchType, mustJSON(patch)))
}

// shutDown stops the VM: its Node leaves the customer's cluster (the KubeVirt cloud-controller-
// manager deletes the Node of a VM that is gone), then the finalizer goes. A customer's cluster
// whose control plane is gone has no Node to remove.
func (p *Provider) shutDown(ctx context.Context, kvm *unstructured.Unstructured, clusterName string) error {
	if !controllerutil.ContainsFinalizer(kvm, Finalizer) {
		return nil
	}
	customer, err := p.customer(ctx, kvm.GetNamespace(), clusterName)
	if err != nil {
		return err
	}
	if customer != nil {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kvm.GetName()}}
		if err := customer.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	controllerutil.RemoveFinalizer(kvm, Finalizer)
	return p.Client.Update(ctx, kvm)
}

// kubeconfigOf reads Cluster API's admin kubeconfig of a cluster (<cluster>-kubeconfig, key
// value); nil when it does not exist.
func kubeconfigOf(ctx context.Context, c client.Client, ns, clusterName string) ([]byte, error) {
	s := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: clusterName + "-kubeconfig"}, s); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return s.Data["value"], nil
}

// runtimeConvert converts between JSON-shaped values (unstructured content and typed structs).
func runtimeConvert(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
