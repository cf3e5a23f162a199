package cluster

import (
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/yaml"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

// AddonsAccessKey is the key of the add-ons' ClusterResourceSet Secret holding what it applies.
const AddonsAccessKey = "access.yaml"

// Addons are the cluster's add-ons by name (the chart of that name in the platform's add-on
// repository), sorted: the platform's base add-ons and those the spec asks for.
func Addons(kc *clusterapi.KubernetesCluster, o Options) []string {
	out := slices.Clone(o.BaseAddons)
	if kc.Spec.Addons.Ingress {
		out = append(out, "ingress")
	}
	if kc.Spec.Addons.Monitoring {
		out = append(out, "monitoring")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AddonValues are the Helm values every add-on is installed with: facts about the cluster that a
// CNI (its networks) or the CSI node plugin (where its volumes live: the tenant namespace, and the
// labels the CSI controller puts on them there, InfraLabels) needs. Data only, no credential.
func AddonValues(kc *clusterapi.KubernetesCluster, o Options) map[string]any {
	infraLabels := map[string]any{}
	for k, v := range InfraLabels(kc) {
		infraLabels[k] = v
	}
	return map[string]any{"cluster": map[string]any{
		"name":           kc.Name,
		"infraNamespace": kc.Namespace,
		"infraLabels":    infraLabels,
		"podCIDR":        o.PodCIDR,
		"serviceCIDR":    o.ServiceCIDR,
	}}
}

// addons are the Flux objects delivering the add-ons into the customer's cluster: a HelmRepository
// of the platform's add-on charts in the cluster's namespace (helm-controller takes sources from
// the HelmRelease's own namespace only), a HelmRelease per add-on whose kubeConfig.secretRef is
// Cluster API's admin kubeconfig (so the release lands in the customer's API server, as
// AddonsIdentity there), and the ClusterResourceSet granting that identity inside. Nothing of
// the management cluster's credentials is part of them.
func addons(kc *clusterapi.KubernetesCluster, o Options) []*unstructured.Unstructured {
	names := Addons(kc, o)
	if len(names) == 0 {
		return nil
	}
	m := meta(kc, AddonsName(kc.Name), nil)
	repoSpec := map[string]any{"url": o.AddonsRepository, "interval": "10m"}
	if strings.HasPrefix(o.AddonsRepository, "oci://") { // the release's charts, from a registry (air-gapped too)
		repoSpec["type"] = "oci"
	}
	repo := newObject(HelmRepositoryGVK, m, repoSpec)
	crs := newObject(ClusterResourceSetGVK, m, map[string]any{
		"clusterSelector": map[string]any{"matchLabels": map[string]any{clusterapi.LabelCluster: kc.Name}},
		"resources":       []any{map[string]any{"kind": "Secret", "name": AddonsName(kc.Name)}},
		"strategy":        "Reconcile",
	})
	out := []*unstructured.Unstructured{repo, crs}
	for _, a := range names {
		out = append(out, newObject(HelmReleaseGVK, meta(kc, AddonReleaseName(kc.Name, a), map[string]string{clusterapi.LabelAddon: a}), map[string]any{
			"interval":           "10m",
			"releaseName":        a,
			"targetNamespace":    "flotilla-" + a,
			"storageNamespace":   "flotilla-" + a,
			"serviceAccountName": AddonsIdentity,
			"kubeConfig":         map[string]any{"secretRef": map[string]any{"name": AdminKubeconfigSecret(kc.Name), "key": "value"}},
			"install":            map[string]any{"createNamespace": true},
			"values":             AddonValues(kc, o),
			"chart": map[string]any{"spec": map[string]any{
				"chart": a, "version": "*", "interval": "10m",
				"sourceRef": map[string]any{"kind": HelmRepositoryGVK.Kind, "name": AddonsName(kc.Name)},
			}},
		}))
	}
	return out
}

// AddonsAccess is the ClusterResourceSet's Secret: a ClusterRoleBinding, applied inside the
// customer's cluster by Cluster API, making AddonsIdentity cluster-admin there. Built as an
// object and marshalled: the namespace is data, never YAML text. Labelled with Cluster API's
// cluster name, so that tenants cannot change it (the chart's policy on Cluster API's Secrets).
func AddonsAccess(kc *clusterapi.KubernetesCluster) (*corev1ac.SecretApplyConfiguration, error) {
	binding := rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: "flotilla:addons"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AddonsIdentity, Namespace: kc.Namespace}},
	}
	b, err := yaml.Marshal(binding)
	if err != nil {
		return nil, err
	}
	m := meta(kc, AddonsName(kc.Name), nil)
	ref := m.OwnerReferences[0]
	return corev1ac.Secret(m.Name, m.Namespace).WithLabels(m.Labels).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(ref.APIVersion).WithKind(ref.Kind).
			WithName(ref.Name).WithUID(ref.UID).WithController(true).WithBlockOwnerDeletion(true)).
		WithType("addons.cluster.x-k8s.io/resource-set").
		WithData(map[string][]byte{AddonsAccessKey: b}), nil
}

func newObject(gvk schema.GroupVersionKind, m metav1.ObjectMeta, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	u.SetLabels(m.Labels)
	u.SetOwnerReferences(m.OwnerReferences)
	return u
}
