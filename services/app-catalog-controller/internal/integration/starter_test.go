package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Every starter app, ordered with its defaults, is delivered through Flux and becomes Ready, with
// the object its chart is about in the tenant's namespace.
func TestStarterCatalogDelivers(t *testing.T) {
	cases := []struct {
		app, name string
		object    schema.GroupVersionKind
		release   string
	}{
		{"postgres", "orders", schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Cluster"}, "pg-orders"},
		{"redis", "cache", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, "redis-cache"},
		{"tenant", "team", schema.GroupVersionKind{Group: "tenancy.flotilla.dev", Version: "v1alpha1", Kind: "Tenant"}, ""},
		{"virtualmachine", "box", schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}, "vm-box"},
		{"kubernetes", "prod", schema.GroupVersionKind{Group: "cluster.flotilla.dev", Version: "v1alpha1", Kind: "KubernetesCluster"}, "k8s-prod"},
		// Its objects' names are fixed (the cluster-controller finds a tenant's etcd by them).
		{"etcd", "main", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, "etcd"},
	}
	ns := tenantNamespace(t, "starter")
	for _, c := range cases {
		t.Run(c.app, func(t *testing.T) {
			ctx := context.Background()
			def := installDefinition(t, c.app)
			gvr := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: def.Spec.Names.Plural}
			if _, err := apps.Resource(gvr).Namespace(ns).Create(ctx, appObject(def.Spec.Names.Kind, ns, c.name, "{}"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if out, err := kubectl(t, "", "wait", "-n", ns, def.Spec.Names.Plural+".apps.flotilla.dev/"+c.name, "--for=condition=Ready", "--timeout=120s"); err != nil {
				t.Fatalf("kubectl wait: %v\n%s", err, out)
			}
			name := c.release
			if name == "" {
				name = c.name
			}
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(c.object)
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				t.Fatalf("%s %s: %v", c.object.Kind, name, err)
			}
			if obj.GetLabels()["app.kubernetes.io/instance"] == "" {
				t.Fatalf("%s %s lacks the release label the volume policies rely on", c.object.Kind, name)
			}
		})
	}
}
