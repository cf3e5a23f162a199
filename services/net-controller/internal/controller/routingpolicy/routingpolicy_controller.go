package routingpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/enqueue"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=routingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=routingpolicies/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=noderoutings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// NodesAppliedCondition: every node the policy selects applied its current generation.
const NodesAppliedCondition = "NodesApplied"

// Reconciler writes RoutingPolicies' status.
type Reconciler struct {
	client.Client
}

// Reconcile summarises the selected nodes' reports into the policy's conditions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &netv1.RoutingPolicy{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper := patch.NewHelper(p)
	var stall *conditions.Stall
	defer func() {
		status.Writer{Client: r.Client, Domain: []string{NodesAppliedCondition}}.Finish(ctx, helper, p, stall, &res, &retErr)
	}()

	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes); err != nil {
		return ctrl.Result{}, err
	}
	sel := labels.Everything()
	if p.Spec.NodeSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
			msg := fmt.Sprintf("spec.nodeSelector: %v; no node applies the policy until it is fixed", err)
			conditions.MarkFalse(p, NodesAppliedCondition, netv1.InvalidNodeSelectorReason, msg)
			stall = &conditions.Stall{Reason: netv1.InvalidNodeSelectorReason, Message: msg}
			return ctrl.Result{}, nil
		}
	}
	var waiting, refused []string
	selected := 0
	for _, n := range nodes.Items {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		selected++
		nr := &netv1.NodeRouting{}
		if err := r.Get(ctx, types.NamespacedName{Name: n.Name}, nr); err != nil {
			waiting = append(waiting, n.Name)
			continue
		}
		if i := slices.IndexFunc(nr.Status.Refused, func(x netv1.RefusedPolicy) bool { return x.Name == p.Name && x.Generation == p.Generation }); i >= 0 {
			refused = append(refused, n.Name+": "+nr.Status.Refused[i].Message)
			continue
		}
		if !slices.Contains(nr.Status.Policies, netv1.AppliedPolicy{Name: p.Name, Generation: p.Generation}) {
			waiting = append(waiting, n.Name)
		}
	}
	switch {
	case len(refused) > 0:
		msg := fmt.Sprintf("Refused by %d of %d nodes: %s", len(refused), selected, strings.Join(refused, "; "))
		conditions.MarkFalse(p, NodesAppliedCondition, "RefusedByNodes", msg)
		stall = &conditions.Stall{Reason: "RefusedByNodes", Message: msg}
	case len(waiting) > 0:
		conditions.MarkFalse(p, NodesAppliedCondition, "WaitingForNodes",
			fmt.Sprintf("Applied on %d of %d nodes; waiting for %s", selected-len(waiting), selected, strings.Join(waiting, ", ")))
	default:
		conditions.MarkTrue(p, NodesAppliedCondition, netv1.ReconciledReason, fmt.Sprintf("Applied on all %d selected nodes", selected))
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller: any node or node report may change any policy's
// summary.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := enqueue.All[netv1.RoutingPolicyList](r.Client)
	return ctrl.NewControllerManagedBy(mgr).
		Named("routingpolicy").
		For(&netv1.RoutingPolicy{}).
		Watches(&netv1.NodeRouting{}, all).
		Watches(&corev1.Node{}, all).
		Complete(r)
}
