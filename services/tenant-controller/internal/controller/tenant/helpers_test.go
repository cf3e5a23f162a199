package tenant_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// TenantBuilder builds Tenants for tests: MakeTenant("dev", "tenant-acme").Quota("cpu", "2").Obj().
type TenantBuilder struct{ t tenancyv1.Tenant }

// MakeTenant starts a tenant named name in namespace ns.
func MakeTenant(name, ns string) *TenantBuilder {
	return &TenantBuilder{t: tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}}
}

func (b *TenantBuilder) Quota(name, q string) *TenantBuilder {
	if b.t.Spec.ResourceQuotas == nil {
		b.t.Spec.ResourceQuotas = corev1.ResourceList{}
	}
	b.t.Spec.ResourceQuotas[corev1.ResourceName(name)] = resource.MustParse(q)
	return b
}
func (b *TenantBuilder) Host(h string) *TenantBuilder { b.t.Spec.Host = h; return b }
func (b *TenantBuilder) Services(ingress, monitoring, etcd bool) *TenantBuilder {
	b.t.Spec.Ingress, b.t.Spec.Monitoring, b.t.Spec.Etcd = ingress, monitoring, etcd
	return b
}
func (b *TenantBuilder) SchedulingClass(c string) *TenantBuilder {
	b.t.Spec.SchedulingClass = c
	return b
}
func (b *TenantBuilder) Grant(role tenancyv1.TenantRole, user string) *TenantBuilder {
	b.t.Spec.Access = append(b.t.Spec.Access, tenancyv1.AccessBinding{Role: role,
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})
	return b
}
func (b *TenantBuilder) Obj() *tenancyv1.Tenant { return b.t.DeepCopy() }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createAll creates tenants in order, parents first, waiting for each namespace a later tenant
// lives in, as a user applying a tree would.
func createAll(ctx context.Context, g Gomega, ts ...*tenancyv1.Tenant) {
	for _, t := range ts {
		g.Eventually(func() error {
			return k8s.Get(ctx, types.NamespacedName{Name: t.Namespace}, &corev1.Namespace{})
		}).WithTimeout(30*time.Second).Should(Succeed(), "namespace %s", t.Namespace)
		g.Expect(k8s.Create(ctx, t)).To(Succeed(), "creating tenant %s/%s", t.Namespace, t.Name)
	}
}

// eventuallyCurrent waits until kstatus computes Current for the tenant: Ready for its generation.
func eventuallyCurrent(ctx context.Context, g Gomega, ts ...*tenancyv1.Tenant) {
	for _, t := range ts {
		g.Eventually(func(g Gomega) {
			got := &tenancyv1.Tenant{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(t), got)).To(Succeed())
			// kstatus calls an object without status Current, so insist on the Ready condition too.
			g.Expect(condition(got, "Ready").Status).To(Equal(metav1.ConditionTrue), "tenant %s: %+v", t.Name, got.Status.Conditions)
			g.Expect(kstatus(g, got)).To(Equal(status.CurrentStatus), "tenant %s: %+v", t.Name, got.Status.Conditions)
		}).WithTimeout(60 * time.Second).Should(Succeed())
	}
}

func kstatus(g Gomega, t *tenancyv1.Tenant) status.Status {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
	g.Expect(err).NotTo(HaveOccurred())
	res, err := status.Compute(&unstructured.Unstructured{Object: u})
	g.Expect(err).NotTo(HaveOccurred())
	return res.Status
}

// deleteTree deletes tenants and waits until they and their namespaces are gone.
func deleteTree(ctx context.Context, g Gomega, ts ...*tenancyv1.Tenant) {
	for _, t := range ts {
		_ = k8s.Delete(ctx, t)
	}
	for _, t := range ts {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(t), &tenancyv1.Tenant{}))
		}).WithTimeout(90*time.Second).Should(BeTrue(), "tenant %s/%s not deleted", t.Namespace, t.Name)
	}
}

func get(ctx context.Context, g Gomega, t *tenancyv1.Tenant) *tenancyv1.Tenant {
	got := &tenancyv1.Tenant{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(t), got)).To(Succeed())
	return got
}

func condition(t *tenancyv1.Tenant, typ string) metav1.Condition {
	for _, c := range t.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}
