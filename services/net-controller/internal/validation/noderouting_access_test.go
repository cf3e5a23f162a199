package validation_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// agentAt is the node agent's service account as kube-apiserver authenticates a token bound to its
// pod on node: the node is in the user's extra.
func agentAt(t *testing.T, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:net-system:net-controller-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:net-system", "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
	}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	must(t, err)
	return c
}

// A node agent writes its own node's NodeRouting and no other: the chart's admission policy checks
// the node its token is bound to, which RBAC cannot.
func TestANodeAgentWritesOnlyItsOwnNodeRouting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	chart := filepath.Join("..", "..", "..", "..", "deploy", "charts", "net-controller")
	for _, f := range []string{filepath.Join(chart, "files", "agent", "role.yaml"), filepath.Join(chart, "templates", "agent-policy.yaml")} {
		must(t, testenv.ApplyFile(ctx, k8s, f))
	}
	must(t, k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "net-controller-agent-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "net-controller-agent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "net-controller-agent", Namespace: "net-system"}},
	}))
	a, b := agentAt(t, "node-own-a"), agentAt(t, "node-own-b")
	nodeRouting := func(name string) *netv1.NodeRouting {
		return &netv1.NodeRouting{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}

	// The policy takes a moment to be enforced once created: wait until node a's agent is refused
	// node b's NodeRouting (a dry run, so nothing is made meanwhile).
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = a.Create(ctx, nodeRouting("node-own-b"), client.DryRunAll)
		if err != nil && !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "NodeRouting node-own-b belongs to another node") ||
		!strings.Contains(err.Error(), "it runs on node-own-a") {
		t.Fatalf("node a's agent creating node b's NodeRouting: %v, want Forbidden naming both nodes", err)
	}

	// Each agent makes and reports in its own.
	own := nodeRouting("node-own-a")
	must(t, a.Create(ctx, own))
	conditions.MarkTrue(own, netv1.AppliedCondition, netv1.ReconciledReason, "applied")
	must(t, a.Status().Update(ctx, own))
	theirs := nodeRouting("node-own-b")
	must(t, b.Create(ctx, theirs))

	// Node a's agent cannot write node b's report, nor claim its policies failed.
	conditions.MarkFalse(theirs, netv1.AppliedCondition, netv1.ApplyFailedReason, "forged")
	if err := a.Status().Update(ctx, theirs); !apierrors.IsForbidden(err) {
		t.Errorf("node a's agent writing node b's NodeRouting status: %v, want Forbidden", err)
	}
	patch := client.MergeFrom(theirs.DeepCopy())
	theirs.Status.Rules = 99
	if err := a.Status().Patch(ctx, theirs, patch); !apierrors.IsForbidden(err) {
		t.Errorf("node a's agent patching node b's NodeRouting status: %v, want Forbidden", err)
	}
	// Without a node (the admin here), RBAC alone decides.
	must(t, k8s.Delete(ctx, theirs))
}
