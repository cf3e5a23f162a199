package tenantaddresspool

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/metallb"
)

// reconcileRelease releases the blocks of a namespace that is gone or no longer a tenant's: each
// IPAddressPool is deleted once no Service holds an address of it; the TenantAddressPool goes with
// the last one. Until then the TenantAddressPool says what holds it. The last Service's change
// brings the namespace back here (watch), so nothing polls.
func (r *Reconciler) reconcileRelease(ctx context.Context, name string, tp *netv1.TenantAddressPool) error {
	own, err := holders{r}.Own(ctx, r.Client, name)
	if err != nil {
		return err
	}
	var held []string
	for i := range own {
		n, err := r.release(ctx, own[i].Name)
		if err != nil {
			return err
		}
		if n > 0 {
			held = append(held, fmt.Sprintf("%s holds %d addresses", own[i].Name, n))
		}
	}
	if tp == nil {
		return nil
	}
	if len(held) == 0 {
		return client.IgnoreNotFound(r.Delete(ctx, tp, client.Preconditions{UID: &tp.UID}))
	}
	helper := patch.NewHelper(tp)
	msg := fmt.Sprintf("Namespace %s is no longer a tenant's; its addresses are released once no Service holds one: %s", name, strings.Join(held, ", "))
	conditions.MarkFalse(tp, netv1.AddressPoolReadyCondition, netv1.AddressPoolInUseReason, msg)
	conditions.MarkDeleting(tp, msg)
	_, err = helper.Status(ctx, r.Client, tp)
	return err
}

// release deletes one of the controller's IPAddressPools if no address of it is held, and returns
// how many are: Services of the namespace whose load-balancer ingress is in the pool, or else
// MetalLB's own count in the pool's status. Both are read past the cache, which may not yet show
// a Service given an address a moment ago, and the deletion holds only for the version of the pool
// read: one MetalLB has counted an address in since is a conflict, and the next reconcile reads
// again.
func (r *Reconciler) release(ctx context.Context, name string) (int, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(metallb.IPAddressPoolGVK)
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, live); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !metallb.Owned(live.GetLabels()) {
		return 0, nil // relabelled by someone else: no longer the controller's to delete
	}
	held, err := r.servicesIn(ctx, live)
	if err != nil {
		return 0, err
	}
	if held == 0 {
		for _, f := range []string{"assignedIPv4", "assignedIPv6"} {
			n, _, _ := unstructured.NestedInt64(live.Object, "status", f)
			held += int(n)
		}
	}
	if held > 0 {
		return held, nil
	}
	uid, rv := live.GetUID(), live.GetResourceVersion()
	return 0, client.IgnoreNotFound(r.Delete(ctx, live, client.Preconditions{UID: &uid, ResourceVersion: &rv}))
}

// servicesIn counts the addresses of the pool that Services of its namespace hold.
func (r *Reconciler) servicesIn(ctx context.Context, pool *unstructured.Unstructured) (int, error) {
	ranges, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses")
	var prefixes []netip.Prefix
	for _, c := range ranges {
		if p, err := netip.ParsePrefix(c); err == nil {
			prefixes = append(prefixes, p)
		}
	}
	svcs := &corev1.ServiceList{}
	if err := r.APIReader.List(ctx, svcs, client.InNamespace(pool.GetLabels()[netv1.LabelNamespace])); err != nil {
		return 0, err
	}
	n := 0
	for _, svc := range svcs.Items {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			a, err := netip.ParseAddr(in.IP)
			if err != nil {
				continue
			}
			for _, p := range prefixes {
				if p.Contains(a) {
					n++
				}
			}
		}
	}
	return n, nil
}
