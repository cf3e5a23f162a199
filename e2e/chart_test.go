package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// Every chart lints, renders with its defaults and with its optional features, and what it renders
// is accepted by a real API server (server-side dry run).
func TestCharts(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	for _, svc := range services(t) {
		chart := filepath.Join(repo, "deploy", "charts", svc)
		t.Run(svc, func(t *testing.T) {
			run(t, "helm", "lint", chart)
			run(t, "helm", "template", svc, chart, "--set", "webhook.certManager.enabled=true",
				"--set", "metrics.serviceMonitor.enabled=true", "--set-json", `webhook.certManager.issuerRef={"name":"ca"}`)
			objs := decodeAll(t, run(t, "helm", "template", svc, chart, "--namespace", "flotilla-system"))

			kinds := map[string]*unstructured.Unstructured{}
			for _, o := range objs {
				kinds[o.GetKind()] = o
			}
			for _, k := range []string{"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service"} {
				if kinds[k] == nil {
					t.Errorf("chart renders no %s", k)
				}
			}
			checkDeployment(t, kinds["Deployment"])
			checkGeneratedRBAC(t, chart, objs, svc)

			ns := &unstructured.Unstructured{}
			ns.SetAPIVersion("v1")
			ns.SetKind("Namespace")
			ns.SetName("flotilla-system")
			if err := client.IgnoreAlreadyExists(env.Client.Create(ctx, ns)); err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("chart-test"), client.DryRunAll); err != nil {
					t.Errorf("API server rejects %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

func checkDeployment(t *testing.T, d *unstructured.Unstructured) {
	t.Helper()
	if d == nil {
		return
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("want one container, got %d", len(containers))
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if !slices.Contains(args, "--leader-elect") {
		t.Errorf("deployment does not elect a leader: %v", args)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if _, ok := c[probe]; !ok {
			t.Errorf("deployment has no %s", probe)
		}
	}
}

// The chart's ClusterRole carries exactly the rules generated from the controller's RBAC markers.
func checkGeneratedRBAC(t *testing.T, chart string, objs []*unstructured.Unstructured, svc string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chart, "files", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var generated map[string]any
	if err := yaml.Unmarshal(raw, &generated); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == svc {
			if !equality.Semantic.DeepEqual(o.Object["rules"], generated["rules"]) {
				t.Errorf("chart ClusterRole rules differ from files/role.yaml")
			}
			return
		}
	}
	t.Errorf("no ClusterRole %s rendered", svc)
}
