package tenantsubnet

import (
	"context"
	"fmt"
	"strings"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
)

// reconcileRelease releases the blocks of a namespace that is gone or no longer a tenant's: each
// Subnet is deleted once no address in it is held; the TenantSubnet goes with the last one. Until
// then the TenantSubnet says what holds it. The deletion of the last IP brings the namespace back
// here (watch), so nothing polls. The Subnets are read past the cache: their status carries
// Kube-OVN's count of the addresses it holds without an IP object, and a deletion is not decided
// on an old copy of it.
func (r *Reconciler) reconcileRelease(ctx context.Context, name string, ts *netv1.TenantSubnet) error {
	own, err := holders{r}.Own(ctx, r.APIReader, name)
	if err != nil {
		return err
	}
	var held []string
	for i := range own {
		n, err := r.release(ctx, &own[i])
		if err != nil {
			return err
		}
		if n > 0 {
			held = append(held, fmt.Sprintf("%s holds %d addresses", own[i].Name, n))
		}
	}
	if ts == nil {
		return nil
	}
	if len(held) == 0 {
		return client.IgnoreNotFound(r.Delete(ctx, ts, client.Preconditions{UID: &ts.UID}))
	}
	helper := patch.NewHelper(ts)
	msg := fmt.Sprintf("Namespace %s is no longer a tenant's; its subnet is released once empty: %s", name, strings.Join(held, ", "))
	conditions.MarkFalse(ts, netv1.SubnetReadyCondition, netv1.SubnetInUseReason, msg)
	conditions.MarkDeleting(ts, msg)
	_, err = helper.Status(ctx, r.Client, ts)
	return err
}

// release deletes one of the controller's Subnets if no address in it is held, and returns how
// many are. The addresses are read past the cache, which may not yet show an IP Kube-OVN made a
// moment ago, and the deletion holds only for the version of the Subnet read: one Kube-OVN has
// changed since (its count of addresses) is a conflict, and the next reconcile reads again.
func (r *Reconciler) release(ctx context.Context, sn *kubeovnv1.Subnet) (int, error) {
	ips := &metav1.PartialObjectMetadataList{}
	ips.SetGroupVersionKind(kubeovnv1.SchemeGroupVersion.WithKind("IPList"))
	if err := r.APIReader.List(ctx, ips, client.MatchingLabels{subnetNameLabel: sn.Name}); err != nil {
		return 0, err
	}
	held := len(ips.Items)
	if held == 0 {
		// Kube-OVN's own count, for addresses it tracks without an IP object (reserved, VIPs).
		held = int(sn.Status.V4UsingIPs.Int64() + sn.Status.V6UsingIPs.Int64())
	}
	if held > 0 {
		return held, nil
	}
	return 0, client.IgnoreNotFound(r.Delete(ctx, sn, client.Preconditions{UID: &sn.UID, ResourceVersion: &sn.ResourceVersion}))
}
