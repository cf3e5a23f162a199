package tenantsubnet_test

import (
	"context"
	"fmt"
	"testing"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	support "github.com/flotilla-dev/flotilla/services/net-controller/internal/controllertest"
)

const (
	timeout  = support.Timeout
	interval = support.Interval
)

// writeCounter records the writing requests a client sends.
type writeCounter = support.WriteCounter

var (
	ctxFor          = support.Ctx
	tenantNamespace = support.TenantNamespace
)

// PoolBuilder builds SubnetPools: MakePool("a", "case").IPv4(24, "10.1.0.0/16").Obj().
type PoolBuilder struct{ p netv1.SubnetPool }

// MakePool starts a pool selecting the namespaces of one test case.
func MakePool(name, testCase string) *PoolBuilder {
	return &PoolBuilder{p: netv1.SubnetPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       netv1.SubnetPoolSpec{NamespaceSelector: support.CaseSelector(testCase)},
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

func create(ctx context.Context, t *testing.T, objs ...client.Object) {
	t.Helper()
	support.Create(ctx, t, k8s, objs...)
}

// readyTenantSubnet waits until the namespace's TenantSubnet is Ready for its generation.
func readyTenantSubnet(ctx context.Context, g Gomega, name string) *netv1.TenantSubnet {
	return support.Ready[netv1.TenantSubnet](ctx, g, k8s, types.NamespacedName{Name: name})
}

// ownSubnets lists the Subnets the controller holds for a namespace.
func ownSubnets(ctx context.Context, g Gomega, ns string) []kubeovnv1.Subnet {
	list := &kubeovnv1.SubnetList{}
	g.Expect(k8s.List(ctx, list, client.MatchingLabels{netv1.LabelNamespace: ns})).To(Succeed())
	return list.Items
}

// dropTenantLabel makes a namespace no longer a tenant's (as if its Tenant were gone).
func dropTenantLabel(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	support.DropTenantLabel(ctx, t, k8s, name)
}

// countVIPs writes Kube-OVN's count of the addresses a Subnet holds without an IP object (VIPs).
func countVIPs(ctx context.Context, g Gomega, subnet string, n int) {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"v4usingIPs":%d}}`, n))
	g.Expect(k8s.Status().Patch(ctx, &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: subnet}}, patch)).To(Succeed())
}

// eventuallyReleased waits until a Subnet is deleted.
func eventuallyReleased(ctx context.Context, g Gomega, subnet string) {
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: subnet}, &kubeovnv1.Subnet{}))
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
}
