package integration_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
)

// The starter catalog's Kubernetes chart renders a KubernetesCluster this API accepts and this
// controller builds, with the platform's values as the app-catalog-controller passes them: chart,
// ApplicationDefinition and CRD stay in step.
func TestCatalogChartRendersAWorkingCluster(t *testing.T) {
	ns := tenantNamespace(t, "catalog", "catalog-etcd")
	storageClass(t, "replicated")
	schedulingClass(t, "gold") // the tenant's class, which the platform's values pass on
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join("..", "..", "..", "..", "deploy", "catalog", "kubernetes", "chart")
	out, err := exec.Command(filepath.Join(bin, "helm"), "template", "k8s-prod", chart, "--namespace", ns,
		"--set-json", `flotilla={"app":{"kind":"Kubernetes","name":"prod","release":"k8s-prod"},"namespace":"catalog","services":{"etcd":"catalog-etcd"},"schedulingClass":"gold"}`,
		"--set-json", `nodeGroups=[{"name":"default","minReplicas":1,"maxReplicas":3,"instanceType":"medium","storageClass":"replicated"},{"name":"batch","minReplicas":0,"maxReplicas":5,"instanceType":"large"}]`,
	).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	kc := &clusterapi.KubernetesCluster{}
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096).Decode(kc); err != nil {
		t.Fatal(err)
	}
	kc.Namespace = ns
	if err := k8s.Create(context.Background(), kc); err != nil {
		t.Fatalf("the API refuses what the catalog chart renders: %v", err)
	}
	kcp := waitObject(t, cluster.KamajiControlPlaneGVK, ns, "k8s-prod-control-plane", nil)
	if str(kcp, "spec", "dataStoreName") != "flotilla-catalog-etcd" {
		t.Errorf("dataStoreName %q", str(kcp, "spec", "dataStoreName"))
	}
	for _, g := range []string{"default", "batch"} {
		waitObject(t, cluster.MachineDeploymentGVK, ns, cluster.MachineDeploymentName("k8s-prod", g), nil)
	}
	if got := get(t, ns, "k8s-prod"); got.Spec.SchedulingClass != "gold" || got.KubeconfigSecretName() != "k8s-prod-admin-kubeconfig" {
		t.Errorf("spec %+v", got.Spec)
	}
}
