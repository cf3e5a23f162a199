package noderouting

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	"github.com/flotilla-dev/flotilla/libs/runtime/status"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/routing"
)

// +kubebuilder:rbac:groups=net.flotilla.dev,resources=routingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=noderoutings,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=net.flotilla.dev,resources=noderoutings/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// Reconciler keeps one node's policy routing.
type Reconciler struct {
	client.Client
	// NodeName is the node the agent runs on.
	NodeName string
	Applier  *routing.Applier
	// Changes reports netlink changes on the node (routing.Watch); nil in tests that drive the
	// reconciler by hand.
	Changes <-chan struct{}
}

// Reconcile applies the node's policies and writes its NodeRouting's status once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (res ctrl.Result, retErr error) {
	nr := &netv1.NodeRouting{}
	if err := r.Get(ctx, types.NamespacedName{Name: r.NodeName}, nr); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		nr = &netv1.NodeRouting{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName}}
		return ctrl.Result{}, client.IgnoreAlreadyExists(r.Create(ctx, nr)) // its creation brings us back
	}
	helper := patch.NewHelper(nr)
	var stall *conditions.Stall
	defer func() {
		status.Writer{Client: r.Client, Domain: []string{netv1.AppliedCondition}}.Finish(ctx, helper, nr, stall, &res, &retErr)
	}()

	nodeLabels, err := r.nodeLabels(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	policies := &netv1.RoutingPolicyList{}
	if err := r.List(ctx, policies); err != nil {
		return ctrl.Result{}, err
	}
	want := routing.Desired(policies.Items, nodeLabels, r.Applier.Links)
	nr.Status.Policies, nr.Status.Rules, nr.Status.Routes = want.Policies, int32(len(want.Rules)), int32(len(want.Routes))
	nr.Status.Refused = nil
	for _, p := range want.Problems {
		nr.Status.Refused = append(nr.Status.Refused, netv1.RefusedPolicy{Name: p.Policy, Generation: p.Generation, Reason: p.Reason, Message: p.Message})
	}
	if _, err := r.Applier.Apply(want); err != nil {
		conditions.MarkFalse(nr, netv1.AppliedCondition, netv1.ApplyFailedReason, err.Error())
		return ctrl.Result{}, err
	}
	if len(want.Problems) > 0 {
		msgs := make([]string, 0, len(want.Problems))
		for _, p := range want.Problems {
			msgs = append(msgs, p.Message)
		}
		msg := strings.Join(msgs, "; ")
		conditions.MarkFalse(nr, netv1.AppliedCondition, want.Problems[0].Reason, msg)
		stall = &conditions.Stall{Reason: want.Problems[0].Reason, Message: msg}
		return ctrl.Result{}, nil
	}
	conditions.MarkTrue(nr, netv1.AppliedCondition, netv1.ReconciledReason,
		fmt.Sprintf("%d rules and %d routes from %d policies", len(want.Rules), len(want.Routes), len(want.Policies)))
	return ctrl.Result{}, nil
}

func (r *Reconciler) nodeLabels(ctx context.Context) (map[string]string, error) {
	n := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: r.NodeName}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return n.Labels, nil
}

// SetupWithManager registers the reconciler. Every event leads to the one node.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	node := reconcile.Request{NamespacedName: types.NamespacedName{Name: r.NodeName}}
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{node}
	})
	mine := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("noderouting").
		For(&netv1.NodeRouting{}, builder.WithPredicates(mine, predicate.GenerationChangedPredicate{})).
		Watches(&netv1.RoutingPolicy{}, toNode).
		Watches(&corev1.Node{}, toNode, builder.WithPredicates(mine, predicate.LabelChangedPredicate{}))
	if r.Changes != nil {
		events := make(chan event.GenericEvent)
		go func() {
			for range r.Changes {
				events <- event.GenericEvent{Object: &netv1.NodeRouting{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName}}}
			}
		}()
		b = b.WatchesRawSource(source.Channel(events, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}
