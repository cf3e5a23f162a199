package tenantnetwork

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/runtime/patch"
	netv1 "github.com/flotilla-dev/flotilla/services/net-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn"
)

// reconcileAddresses gives the network the platform addresses its spec needs (one for its router
// when it has SNAT or floating addresses, one per floating address), keeps those it holds, and
// lets go of those it no longer needs. The status is the ledger: a change is written at once,
// before any address is programmed into OVN, so a restart never hands one out twice.
func (r *Reconciler) reconcileAddresses(ctx context.Context, s *scope, helper *patch.Helper) error {
	tn := s.tn
	needRouter := tn.Spec.SNAT || len(tn.Spec.FloatingIPs) > 0
	want := map[string]bool{}
	for _, f := range tn.Spec.FloatingIPs {
		want[f.Name] = true
	}
	// Let go of what the spec no longer needs.
	before := tn.Status.DeepCopy()
	if !needRouter {
		tn.Status.SNATIP = ""
	}
	tn.Status.FloatingIPs = slices.DeleteFunc(tn.Status.FloatingIPs, func(f netv1.FloatingIPStatus) bool { return !want[f.Name] })
	missing := 0
	if needRouter && tn.Status.SNATIP == "" {
		missing++
	}
	for name := range want {
		if !slices.ContainsFunc(tn.Status.FloatingIPs, func(f netv1.FloatingIPStatus) bool { return f.Name == name }) {
			missing++
		}
	}
	if missing > 0 {
		// Held until the allocation is recorded: the next allocation reads it.
		r.allocating.Lock()
		defer r.allocating.Unlock()
		if err := r.allocate(ctx, s, want, needRouter); err != nil || s.stall != nil {
			return err
		}
	}
	if before.SNATIP != tn.Status.SNATIP || !slices.Equal(before.FloatingIPs, tn.Status.FloatingIPs) {
		// Only over the copy the ledger was read from: a copy older than the last write (a cache
		// that has not caught up) does not know what the network holds, and would hand it other
		// addresses while OVN still uses the ones it has. Then the write is a Conflict and the
		// network is looked at again.
		if _, err := helper.StatusIfCurrent(ctx, r.Client, tn); err != nil {
			return err
		}
	}
	held := len(tn.Status.FloatingIPs)
	if tn.Status.SNATIP != "" {
		held++
	}
	conditions.MarkTrue(tn, netv1.AddressesReadyCondition, netv1.ReconciledReason, fmt.Sprintf("The network holds %d external addresses", held))
	return nil
}

// allocate hands out the missing addresses, reading every network's from kube-apiserver.
func (r *Reconciler) allocate(ctx context.Context, s *scope, want map[string]bool, needRouter bool) error {
	tn := s.tn
	all := &netv1.TenantNetworkList{}
	if err := r.APIReader.List(ctx, all); err != nil {
		return err
	}
	used := map[netip.Addr]bool{}
	inNamespace := 0
	for _, o := range all.Items {
		if o.UID == tn.UID {
			continue
		}
		for _, a := range held(&o) {
			used[a] = true
			if o.Namespace == tn.Namespace {
				inNamespace++
			}
		}
	}
	for _, a := range held(tn) {
		used[a] = true
	}
	need := len(want)
	if needRouter {
		need++
	}
	if inNamespace+need > r.PerNamespace {
		return r.exhausted(s, fmt.Sprintf("Namespace %s may hold %d external addresses; its other networks hold %d and this one needs %d",
			tn.Namespace, r.PerNamespace, inNamespace, need))
	}
	next := func() (string, error) {
		a, err := r.External.Next(used)
		if err != nil {
			return "", err
		}
		used[a] = true
		return a.String(), nil
	}
	if needRouter && tn.Status.SNATIP == "" {
		a, err := next()
		if err != nil {
			return r.exhausted(s, err.Error())
		}
		tn.Status.SNATIP = a
	}
	for _, f := range tn.Spec.FloatingIPs {
		if slices.ContainsFunc(tn.Status.FloatingIPs, func(h netv1.FloatingIPStatus) bool { return h.Name == f.Name }) {
			continue
		}
		a, err := next()
		if err != nil {
			return r.exhausted(s, err.Error())
		}
		tn.Status.FloatingIPs = append(tn.Status.FloatingIPs, netv1.FloatingIPStatus{Name: f.Name, ExternalIP: a})
	}
	return nil
}

func (r *Reconciler) exhausted(s *scope, msg string) error {
	conditions.MarkFalse(s.tn, netv1.AddressesReadyCondition, netv1.AddressesExhaustedReason, msg)
	s.stall = &conditions.Stall{Reason: netv1.AddressesExhaustedReason, Message: msg}
	return nil
}

// held are the external addresses a network's status records.
func held(tn *netv1.TenantNetwork) []netip.Addr {
	var out []netip.Addr
	for _, s := range append([]string{tn.Status.SNATIP}, floating(tn)...) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func floating(tn *netv1.TenantNetwork) []string {
	var out []string
	for _, f := range tn.Status.FloatingIPs {
		out = append(out, f.ExternalIP)
	}
	return out
}

// reconcileOVN brings the network's rows in the northbound database to the spec.
func (r *Reconciler) reconcileOVN(ctx context.Context, s *scope) error {
	n, err := network(s.tn, r.External)
	if err != nil {
		return err
	}
	want := ovn.Desired(n)
	rows, err := r.NB.Ensure(ctx, want)
	if err != nil {
		reason := "TransactionFailed"
		if errors.Is(err, ovn.ErrUnavailable) {
			reason = netv1.OVNUnavailableReason
		}
		conditions.MarkFalse(s.tn, netv1.OVNReadyCondition, reason, err.Error())
		return err
	}
	if rows > 0 {
		transactions.Inc()
		if s.converged {
			restored.Add(float64(rows))
		}
	}
	s.tn.Status.Router, s.tn.Status.Switch = want.Router.Name, want.Switch.Name
	conditions.MarkTrue(s.tn, netv1.OVNReadyCondition, netv1.ReconciledReason,
		fmt.Sprintf("Router %s and switch %s are in OVN", want.Router.Name, want.Switch.Name))
	return nil
}

// reconcileDelete removes the network's rows, then lets the object go. A network whose switch
// still has workload ports waits for them (their removal comes back as an event).
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) error {
	if _, err := r.NB.Remove(ctx, key(s.tn)); err != nil {
		conditions.MarkDeleting(s.tn, "Removing the network from OVN: "+err.Error())
		if errors.Is(err, ovn.ErrInUse) {
			return nil
		}
		return err
	}
	transactions.Inc()
	return client.IgnoreNotFound(patch.RemoveFinalizer(ctx, r.Client, s.tn, netv1.Finalizer))
}
