package capitest_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/localprovider"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// tenantNamespace makes a tenant namespace as the tenant-controller does (its own etcd, the
// tenant label) and binds the tenant admin role to the group <ns>-admin, as the tenant-controller
// binds it.
func tenantNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{tenancyv1.LabelTenant: ns, tenancyv1.LabelEtcd: ns}}}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:tenant:admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: ns + "-admin"}},
	}
	if err := k8s.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
}

// tenantAdmin is user, a member of the group <ns>-admin, once the aggregated tenant admin role
// lets it write Secrets in ns.
func tenantAdmin(t *testing.T, ns, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{ns + "-admin"}}
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Resource: "secrets"}}}
	eventually(t, user+"'s role in "+ns, func() (bool, error) {
		got, err := typed.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed, err
	})
	c, err := env.As(user, ns+"-admin")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tenantSuperAdmin is user, bound to the tenant super-admin role (who may grant roles in ns) as
// the tenant-controller binds it, once the aggregated role lets it create RoleBindings in ns.
func tenantSuperAdmin(t *testing.T, ns, user string) client.Client {
	t.Helper()
	ctx := context.Background()
	group := ns + "-super-admin"
	if err := k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-super-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:tenant:super-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: group}},
	}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	c, err := env.As(user, group)
	if err != nil {
		t.Fatal(err)
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: rbacv1.GroupName, Resource: "rolebindings"}}}
	eventually(t, user+"'s role in "+ns, func() (bool, error) {
		r := review.DeepCopy()
		err := c.Create(ctx, r)
		return err == nil && r.Status.Allowed, err
	})
	return c
}

func mustForbid(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want forbidden, got %v", what, err)
	}
}

// Tenants are hostile: a sibling tenant's admin reaches nothing of the cluster; the cluster's own
// tenant admin cannot point its Cluster API objects elsewhere nor rewrite the Secrets Cluster
// API's controllers act on; and nothing the cluster is made of, or delivers into the customer's
// cluster, carries a credential of the management cluster; and the identity of the cluster's
// cloud-controller-manager, CSI controller and autoscaler, which holds more than the tenant's
// admin, cannot be obtained, used or widened by that admin.
func TestAttackTenantAdminsAndTheCluster(t *testing.T) {
	ctx := context.Background()
	tenantNamespace(t, "tenant-a")
	tenantNamespace(t, "tenant-b")
	startProvider(t, "tenant-a")
	kc := smallCluster("tenant-a", "k", 1, 2)
	kc.Spec.Addons.Ingress = true
	if err := k8s.Create(ctx, kc); err != nil {
		t.Fatal(err)
	}
	kc = clusterCondition(t, kc, "Ready")
	alice := tenantAdmin(t, "tenant-a", "alice@a.example")
	bob := tenantAdmin(t, "tenant-b", "bob@b.example")
	secrets := []string{kc.Status.KubeconfigSecretName, "k-kubeconfig", "k-ca"}

	t.Run("a sibling tenant's admin cannot read the cluster or its kubeconfig", func(t *testing.T) {
		for _, name := range secrets {
			mustForbid(t, "bob reads Secret "+name, bob.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: name}, &corev1.Secret{}))
		}
		mustForbid(t, "bob lists tenant-a's Secrets", bob.List(ctx, &corev1.SecretList{}, client.InNamespace("tenant-a")))
		mustForbid(t, "bob reads the KubernetesCluster", bob.Get(ctx, client.ObjectKeyFromObject(kc), &clusterapi.KubernetesCluster{}))
		cp := object(cluster.KamajiControlPlaneGVK)
		mustForbid(t, "bob reads the KamajiControlPlane", bob.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: cluster.ControlPlaneName("k")}, cp))
	})

	t.Run("the tenant's admin cannot point the Cluster API objects at another tenant", func(t *testing.T) {
		edits := []struct {
			gvk   schema.GroupVersionKind
			name  string
			patch map[string]any
		}{
			{cluster.KamajiControlPlaneGVK, cluster.ControlPlaneName("k"), map[string]any{"spec": map[string]any{"dataStoreName": cluster.DataStoreName("tenant-b"), "dataStoreSchema": "tenant-b_x"}}},
			{cluster.ClusterGVK, "k", map[string]any{"spec": map[string]any{"infrastructureRef": map[string]any{"name": "elsewhere"}}}},
			{cluster.MachineDeploymentGVK, cluster.MachineDeploymentName("k", "default"), map[string]any{"spec": map[string]any{"clusterName": "other"}}},
			{cluster.KubevirtClusterGVK, "k", map[string]any{"spec": map[string]any{"infraClusterSecretRef": map[string]any{"name": "x", "namespace": "tenant-b"}}}},
		}
		for _, e := range edits {
			u := object(e.gvk)
			u.SetNamespace("tenant-a")
			u.SetName(e.name)
			b, _ := json.Marshal(e.patch)
			mustForbid(t, "alice patches "+e.gvk.Kind+" "+e.name, alice.Patch(ctx, u, client.RawPatch(types.MergePatchType, b)))
		}
		// Her etcd's DataStore is the platform's (cluster-scoped): she can neither repoint it nor
		// describe another etcd for her control planes.
		ds := object(cluster.DataStoreGVK)
		ds.SetName(cluster.DataStoreName("tenant-a"))
		mustForbid(t, "alice repoints her etcd's DataStore", alice.Patch(ctx, ds,
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"endpoints":["etcd.tenant-b.svc:2379"]}}`))))
		mustForbid(t, "alice makes a DataStore", alice.Create(ctx, cluster.DataStore("alice")))
		mustForbid(t, "alice changes the KubernetesCluster directly (clusters are ordered through the apps API)",
			alice.Patch(ctx, &clusterapi.KubernetesCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "k"}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"controlPlane":{"replicas":3}}}`))))
	})

	t.Run("the tenant's admin reads but cannot rewrite, remove or plant Cluster API's Secrets", func(t *testing.T) {
		for _, name := range secrets {
			s := &corev1.Secret{}
			if err := alice.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: name}, s); err != nil {
				t.Fatalf("alice reads her cluster's Secret %s: %v", name, err)
			}
			s.Data = map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\nusers: [{name: x, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n")}
			mustForbid(t, "alice rewrites "+name, alice.Update(ctx, s))
			mustForbid(t, "alice deletes "+name, alice.Delete(ctx, s))
		}
		planted := []*corev1.Secret{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "next-kubeconfig"}, StringData: map[string]string{"value": "x"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "next-ca"}, Type: "cluster.x-k8s.io/secret"},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "next-etcd", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "next"}}},
		}
		for _, s := range planted {
			err := alice.Create(ctx, s)
			mustForbid(t, "alice plants "+s.Name, err)
			if err != nil && !strings.Contains(err.Error(), "written by the platform only") {
				t.Errorf("the refusal does not say why: %v", err)
			}
		}
		// Her own Secrets are hers.
		if err := alice.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "app-password"}, StringData: map[string]string{"p": "x"}}); err != nil {
			t.Errorf("alice creates an ordinary Secret: %v", err)
		}
	})

	t.Run("the tenant's admin cannot obtain, use or widen the cluster's infrastructure identity", func(t *testing.T) {
		stem := cluster.InfraName("tenant-a", "k")
		sa := &corev1.ServiceAccount{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: infraNamespace, Name: stem}, sa); err != nil {
			t.Fatalf("the cluster's infrastructure ServiceAccount: %v", err)
		}
		// Its rights are in the cluster's namespace only: there the CSI controller grows a volume's
		// claim (under the tenant's quota); in a sibling's, nothing.
		for ns, want := range map[string]bool{"tenant-a": true, "tenant-b": false} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "system:serviceaccount:" + infraNamespace + ":" + stem, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + infraNamespace},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Resource: "persistentvolumeclaims"}}}
			if err := k8s.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != want {
				t.Errorf("the infrastructure ServiceAccount may patch claims in %s: %v, want %v", ns, sar.Status.Allowed, want)
			}
		}
		mustForbid(t, "alice reads the kubeconfig's copy", alice.Get(ctx, types.NamespacedName{Namespace: infraNamespace,
			Name: cluster.InfraKubeconfigSecret("tenant-a", "k")}, &corev1.Secret{}))
		mustForbid(t, "alice requests a token of the infrastructure ServiceAccount",
			alice.SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{}))
		mustForbid(t, "alice runs a pod as it", alice.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: infraNamespace, Name: "steal"},
			Spec:       corev1.PodSpec{ServiceAccountName: stem, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}))
		mustForbid(t, "alice lists the infrastructure controllers' pods", alice.List(ctx, &corev1.PodList{}, client.InNamespace(infraNamespace)))
		// The tenant's super-admin grants roles in the namespace; RBAC's escalation check still
		// refuses the infrastructure role: she holds none of its KubeVirt and machine rights.
		carol := tenantSuperAdmin(t, "tenant-a", "carol@a.example")
		mustForbid(t, "carol binds the infrastructure role to herself", carol.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "mine"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cluster.InfraClusterRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "carol@a.example"}}}))
		rb := &rbacv1.RoleBinding{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: cluster.InfraBindingName("k")}, rb); err != nil {
			t.Fatal(err)
		}
		rb.Subjects = append(rb.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: "carol@a.example"})
		mustForbid(t, "carol adds herself to the cluster's infrastructure RoleBinding", carol.Update(ctx, rb))
	})

	t.Run("a customer's cluster is its own: a sibling's kubeconfig does not open it", func(t *testing.T) {
		startProvider(t, "tenant-b")
		b := smallCluster("tenant-b", "k", 0, 1)
		if err := k8s.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b = clusterCondition(t, b, clusterapi.ControlPlaneReadyCondition)
		_, inA := customerKubeconfig(t, kc)
		_, inB := customerKubeconfig(t, b)
		if err := inA.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-a"}}); err != nil {
			t.Fatal(err)
		}
		if err := inB.Get(ctx, client.ObjectKey{Name: "only-a"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("tenant-a's namespace seen in tenant-b's cluster (the same name, another etcd prefix): %v", err)
		}
		// tenant-a's credentials against tenant-b's API server: its CA does not vouch for the
		// server, and, trusting any server, its client certificate is not one tenant-b's accepts.
		s := &corev1.Secret{}
		if err := alice.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: kc.Status.KubeconfigSecretName}, s); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[kubernetescluster.KubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host = b.Status.Endpoint
		cross, err := client.New(cfg, client.Options{})
		if err == nil {
			err = cross.List(ctx, &corev1.NamespaceList{})
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("tenant-a's CA trusted tenant-b's API server: %v", err)
		}
		cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.Insecure = nil, true
		cross, err = client.New(cfg, client.Options{})
		if err == nil {
			err = cross.List(ctx, &corev1.NamespaceList{})
		}
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("tenant-a's client certificate at tenant-b's API server: want unauthorized, got %v", err)
		}
	})

	t.Run("the add-ons' identity holds nothing in the management cluster", func(t *testing.T) {
		// helm-controller impersonates it inside the customer's cluster only; a tenant admin may
		// make a ServiceAccount of that name in the namespace, and gets nothing with it here.
		if err := alice.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: cluster.AddonsIdentity}}); err != nil {
			t.Fatal(err)
		}
		addons, err := env.As("system:serviceaccount:tenant-a:"+cluster.AddonsIdentity, "system:serviceaccounts", "system:serviceaccounts:tenant-a", "system:authenticated")
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"tenant-a", "tenant-b"} {
			mustForbid(t, "flotilla-addons reads Secrets of "+ns, addons.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
			mustForbid(t, "flotilla-addons reads HelmReleases of "+ns, addons.List(ctx, listOf(cluster.HelmReleaseGVK), client.InNamespace(ns)))
		}
		mustForbid(t, "flotilla-addons reads the kubeconfig", addons.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: "k-kubeconfig"}, &corev1.Secret{}))
	})

	t.Run("nothing the cluster is made of or delivers inside carries a management credential", func(t *testing.T) {
		// The management cluster's endpoint and CA, and every ServiceAccount token of the tenant
		// namespace, must appear in none of the owned objects, the bootstrap data delivered into the
		// guests, or the customer's kubeconfig.
		mgmtCA := strings.TrimSpace(string(env.Config.CAData))
		mgmt, err := url.Parse(env.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		forbidden := []*regexp.Regexp{
			// host:port, not the prefix of a longer port
			regexp.MustCompile(regexp.QuoteMeta(mgmt.Host) + `(?:[^0-9]|$)`),
			regexp.MustCompile(regexp.QuoteMeta(mgmtCA)),
			regexp.MustCompile(regexp.QuoteMeta(base64.StdEncoding.EncodeToString([]byte(mgmtCA)))),
		}
		if !forbidden[0].MatchString("server: https://"+mgmt.Host+"\n") || forbidden[0].MatchString("server: https://"+mgmt.Host+"1") {
			t.Fatalf("the endpoint pattern %s is wrong", forbidden[0])
		}
		all := &corev1.SecretList{}
		if err := k8s.List(ctx, all, client.InNamespace("tenant-a")); err != nil {
			t.Fatal(err)
		}
		var delivered []any
		for _, s := range all.Items {
			switch {
			case s.Type == corev1.SecretTypeServiceAccountToken:
				forbidden = append(forbidden, regexp.MustCompile(regexp.QuoteMeta(string(s.Data[corev1.ServiceAccountTokenKey]))))
			case s.Labels[clusterapi.LabelCluster] == "k" || s.Labels["cluster.x-k8s.io/cluster-name"] == "k":
				// the kubeconfigs, the CA, each machine's bootstrap data, decoded
				data := map[string]any{}
				for k, v := range s.Data {
					data[k] = string(v)
				}
				delivered = append(delivered, map[string]any{"secret": s.Name, "data": data})
			}
		}
		for _, gvk := range []schema.GroupVersionKind{cluster.ClusterGVK, cluster.KubevirtClusterGVK, cluster.KamajiControlPlaneGVK,
			cluster.KubeadmConfigTemplateGVK, cluster.KubevirtMachineTmplGVK, cluster.MachineDeploymentGVK, cluster.MachineHealthCheckGVK,
			cluster.HelmRepositoryGVK, cluster.HelmReleaseGVK, cluster.ClusterResourceSetGVK,
			machineGVK, localprovider.KubeadmConfigGVK, localprovider.KubevirtMachineGVK} {
			for _, o := range list(t, gvk, "tenant-a", nil) {
				delivered = append(delivered, o.Object)
				if o.GetLabels()[clusterapi.LabelCluster] == "k" {
					// What the controller writes names no Secret but the cluster's own.
					walkStrings(o.Object, func(path, s string) {
						if strings.HasSuffix(path, "secretRef.name") || strings.HasSuffix(path, "secretName") {
							if !strings.HasPrefix(s, "k-") {
								t.Errorf("%s %s names Secret %s at %s", gvk.Kind, o.GetName(), s, path)
							}
						}
					})
				}
			}
		}
		if len(delivered) < 10 {
			t.Fatalf("walked only %d objects", len(delivered))
		}
		walkStrings(delivered, func(path, s string) {
			for _, f := range forbidden {
				if f.MatchString(s) {
					t.Errorf("a management credential or endpoint (%.40s) is part of the cluster at %s", f, path)
				}
			}
		})
	})
}

func object(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

func listOf(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}

// walkStrings calls f with the path and value of every string in v.
func walkStrings(v any, f func(path, s string)) {
	var walk func(string, any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path, e)
			}
		case string:
			f(path, x)
		}
	}
	walk("", v)
}
