package workloads

import (
	"os"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/kustomize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return u
}

// What of a release is not ready: its StatefulSets by kstatus, a CloudNativePG Cluster
// by the Postgres definition's health check (read from the starter catalog), judged as Flux
// judges healthCheckExprs.
func TestNotReady(t *testing.T) {
	def := object(t, readFile(t, "../../../../deploy/catalog/postgres/definition.yaml"))
	raw, _, _ := unstructured.NestedSlice(def.Object, "spec", "readiness", "healthChecks")
	var hcs []kustomize.CustomHealthCheck
	for _, r := range raw {
		m := r.(map[string]any)
		hcs = append(hcs, kustomize.CustomHealthCheck{APIVersion: m["apiVersion"].(string), Kind: m["kind"].(string),
			HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: m["current"].(string)}})
	}
	checks, err := Compile(hcs)
	if err != nil {
		t.Fatal(err)
	}
	const (
		setReady    = "{apiVersion: apps/v1, kind: StatefulSet, metadata: {name: redis-a, generation: 1}, spec: {replicas: 1}, status: {observedGeneration: 1, replicas: 1, readyReplicas: 1, currentReplicas: 1, updatedReplicas: 1, availableReplicas: 1, currentRevision: r1, updateRevision: r1}}"
		setStarting = "{apiVersion: apps/v1, kind: StatefulSet, metadata: {name: redis-a, generation: 1}, spec: {replicas: 1}, status: {observedGeneration: 1, replicas: 1, currentReplicas: 1, updatedReplicas: 1, currentRevision: r1, updateRevision: r1}}"
		deployment  = "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web, generation: 2}, spec: {replicas: 2}, status: {observedGeneration: 1, replicas: 2, readyReplicas: 2, updatedReplicas: 2, availableReplicas: 2}}"
		clusterNew  = "{apiVersion: postgresql.cnpg.io/v1, kind: Cluster, metadata: {name: pg-a, generation: 1}}"
		clusterUp   = "{apiVersion: postgresql.cnpg.io/v1, kind: Cluster, metadata: {name: pg-a, generation: 1}, status: {conditions: [{type: Ready, status: 'False', reason: ClusterIsNotReady}]}}"
		clusterOK   = "{apiVersion: postgresql.cnpg.io/v1, kind: Cluster, metadata: {name: pg-a, generation: 1}, status: {conditions: [{type: Ready, status: 'True'}]}}"
	)
	for _, tc := range []struct {
		name string
		docs []string
		want string // a part of the message; "" for ready
	}{
		{"nothing", nil, ""},
		{"a StatefulSet ready", []string{setReady}, ""},
		{"a StatefulSet short of ready replicas", []string{setStarting}, "StatefulSet redis-a: Ready: 0/1"},
		{"a Deployment its controller has not seen yet", []string{setReady, deployment}, "Deployment web: "},
		{"a Cluster without status yet", []string{clusterNew}, "Cluster pg-a: not ready yet"},
		{"a Cluster not Ready", []string{clusterUp, setReady}, "Cluster pg-a: not ready yet"},
		{"a Cluster Ready", []string{clusterOK}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []*unstructured.Unstructured
			for _, d := range tc.docs {
				objs = append(objs, object(t, d))
			}
			got := NotReady(objs, checks)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("NotReady: %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := Compile([]kustomize.CustomHealthCheck{{APIVersion: "v1", Kind: "X", HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.("}}}); err == nil ||
		!strings.Contains(err.Error(), "readiness.healthChecks[0] (X)") {
		t.Errorf("an expression that does not parse: %v, want an error naming it", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
