package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// The app-catalog-controller's rights over Secrets, as its chart renders them, against a real API
// server: it reads the catalog's Secrets in its own namespace and nowhere else, and writes Secrets
// only as its copies (labelled) in delivery namespaces: never a tenant's Secret, never an
// unlabelled one in a delivery namespace, not even to read it through a write's answer. And it
// creates ServiceAccounts only as apps' identities in delivery namespaces.
func TestCatalogControllerWritesOnlyItsSecretCopies(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	for name, labels := range map[string]map[string]string{
		"flotilla-system": nil,
		"tenant-acme":     {"tenancy.flotilla.dev/tenant": "acme"},
		"apps-acme":       {"tenancy.flotilla.dev/delivery-for": "tenant-acme"},
	} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	for _, o := range renderChart(t, "app-catalog-controller") {
		if kinds[o.GetKind()] {
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("test")); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "partner-auth", Namespace: "flotilla-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "tenant-acme"}, StringData: map[string]string{"password": "acme's"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.redis-cache.v1", Namespace: "apps-acme"}},
	} {
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	acc, err := env.As("system:serviceaccount:flotilla-system:app-catalog-controller",
		"system:serviceaccounts", "system:serviceaccounts:flotilla-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	copyOf := func(ns, name string, labelled bool) *corev1ac.SecretApplyConfiguration {
		s := corev1ac.Secret(name, ns).WithStringData(map[string]string{"password": "x"})
		if labelled {
			s.WithLabels(map[string]string{"catalog.flotilla.dev/source-copy": "true"})
		}
		return s
	}
	apply := func(s *corev1ac.SecretApplyConfiguration) error {
		return acc.Apply(ctx, s, client.FieldOwner("flotilla-app-catalog-controller"), client.ForceOwnership)
	}

	// kube-apiserver loads the policy a moment after it is created (a probe of a new name, until
	// refused); then its copies pass …
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err := apply(copyOf("tenant-acme", "probe", true))
		return err != nil && strings.Contains(err.Error(), "secret-copies"), nil
	}); err != nil {
		t.Fatal("the policy never refused a write in a tenant's namespace")
	}
	if err := apply(copyOf("apps-acme", "flotilla-system.partner-auth", true)); err != nil {
		t.Fatalf("its copy in a delivery namespace was refused: %v", err)
	}
	if err := acc.Get(ctx, client.ObjectKey{Namespace: "flotilla-system", Name: "partner-auth"}, &corev1.Secret{}); err != nil {
		t.Fatalf("it cannot read the catalog's Secrets: %v", err)
	}
	if err := acc.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps-acme", Name: "flotilla-system.partner-auth"}}); err != nil {
		t.Fatalf("it cannot delete its copy: %v", err)
	}
	// … and nothing else.
	for what, err := range map[string]error{
		"read a tenant's Secret":                    acc.Get(ctx, client.ObjectKey{Namespace: "tenant-acme", Name: "db"}, &corev1.Secret{}),
		"list Secrets across the cluster":           acc.List(ctx, &corev1.SecretList{}),
		"read Helm's records":                       acc.Get(ctx, client.ObjectKey{Namespace: "apps-acme", Name: "sh.helm.release.v1.redis-cache.v1"}, &corev1.Secret{}),
		"overwrite a tenant's Secret":               apply(copyOf("tenant-acme", "db", true)),
		"write an unlabelled Secret in delivery":    apply(copyOf("apps-acme", "sh.helm.release.v1.redis-cache.v1", false)),
		"label Helm's records as its own":           apply(copyOf("apps-acme", "sh.helm.release.v1.redis-cache.v1", true)),
		"delete a tenant's Secret":                  acc.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-acme", Name: "db"}}),
		"delete Helm's records":                     acc.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps-acme", Name: "sh.helm.release.v1.redis-cache.v1"}}),
		"create a copy in the platform's namespace": apply(copyOf("flotilla-system", "planted", true)),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the app-catalog-controller could %s: %v", what, err)
		}
	}
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "tenant-acme", Name: "db"}, s); err != nil || string(s.Data["password"]) != "acme's" {
		t.Errorf("the tenant's Secret changed: %v %q", err, s.Data["password"])
	}

	// The ServiceAccounts it creates are apps' identities (policy app-catalog-controller-identities).
	identity := func(ns string, mutate func(*corev1.ServiceAccount)) error {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "redis-cache", Namespace: ns,
			Labels: map[string]string{"catalog.flotilla.dev/app-identity": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "helm.toolkit.fluxcd.io/v2", Kind: "HelmRelease", Name: "redis-cache",
				UID: "6a4d1b8e-0000-4000-8000-000000000001", Controller: ptr.To(true)}}},
			AutomountServiceAccountToken: ptr.To(false)}
		if mutate != nil {
			mutate(sa)
		}
		return acc.Create(ctx, sa)
	}
	for what, err := range map[string]error{
		"create an identity in a tenant's namespace":  identity("tenant-acme", nil),
		"create an identity that mounts its token":    identity("apps-acme", func(sa *corev1.ServiceAccount) { sa.AutomountServiceAccountToken = nil }),
		"create an unlabelled ServiceAccount":         identity("apps-acme", func(sa *corev1.ServiceAccount) { sa.Labels = nil }),
		"create a ServiceAccount no HelmRelease owns": identity("apps-acme", func(sa *corev1.ServiceAccount) { sa.OwnerReferences = nil }),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the app-catalog-controller could %s: %v", what, err)
		}
	}
	if err := identity("apps-acme", nil); err != nil {
		t.Fatalf("an app's identity was refused: %v", err)
	}
	err = acc.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "redis-cache", Namespace: "apps-acme"}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the app-catalog-controller could delete an identity: %v", err)
	}
}
