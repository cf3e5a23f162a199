package tenantsubnet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

const (
	timeout  = time.Minute
	interval = 100 * time.Millisecond
)

// testLabel keeps each test's namespaces to the test's own pool.
const testLabel = "test.net.flotilla.dev/case"

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// PoolBuilder builds SubnetPools: MakePool("a", "case").IPv4(24, "10.1.0.0/16").Obj().
type PoolBuilder struct{ p netv1.SubnetPool }

// MakePool starts a pool selecting the namespaces of one test case.
func MakePool(name, testCase string) *PoolBuilder {
	return &PoolBuilder{p: netv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: netv1.SubnetPoolSpec{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{testLabel: testCase}}},
	}}
}

func (b *PoolBuilder) IPv4(bits int32, cidrs ...string) *PoolBuilder {
	b.p.Spec.IPv4 = &netv1.BlockRange{CIDRs: cidrs, BlockPrefixLength: bits}
	return b
}

func (b *PoolBuilder) IPv6(bits int32, cidrs ...string) *PoolBuilder {
	b.p.Spec.IPv6 = &netv1.BlockRange{CIDRs: cidrs, BlockPrefixLength: bits}
	return b
}

func (b *PoolBuilder) Obj() *netv1.SubnetPool { return b.p.DeepCopy() }

// tenantNamespace is a namespace as the tenant-controller labels it.
func tenantNamespace(name, testCase string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		tenancyv1.LabelTenant: name, testLabel: testCase}}}
}

func create(ctx context.Context, t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// readyTenantSubnet waits until the namespace's TenantSubnet is Ready for its generation.
func readyTenantSubnet(ctx context.Context, g Gomega, name string) *netv1.TenantSubnet {
	ts := &netv1.TenantSubnet{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: name}, ts)).To(Succeed())
		g.Expect(conditions.IsReady(ts)).To(BeTrue(), "TenantSubnet %s: %v", name, ts.Status.Conditions)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	return ts
}

// ownSubnets lists the Subnets the controller holds for a namespace.
func ownSubnets(ctx context.Context, g Gomega, ns string) []kubeovnv1.Subnet {
	list := &kubeovnv1.SubnetList{}
	g.Expect(k8s.List(ctx, list, client.MatchingLabels{netv1.LabelNamespace: ns})).To(Succeed())
	return list.Items
}

// writeCounter records the writing requests a client sends (even those kube-apiserver turns into
// no-ops, which leave the resourceVersion alone).
type writeCounter struct {
	mu    sync.Mutex
	calls []string
}

func (w *writeCounter) add(verb string, obj any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, fmt.Sprintf("%s %T", verb, obj))
}

func (w *writeCounter) wrap(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			w.add("create", o)
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			w.add("update", o)
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.add("patch", o)
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w.add("apply", o)
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			w.add("delete", o)
			return c.Delete(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.add("patch/"+sub, o)
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			w.add("update/"+sub, o)
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
	})
}

// dropTenantLabel makes a namespace no longer a tenant's (as if its Tenant were gone).
func dropTenantLabel(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	before := ns.DeepCopy()
	delete(ns.Labels, tenancyv1.LabelTenant)
	if err := k8s.Patch(ctx, ns, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}
