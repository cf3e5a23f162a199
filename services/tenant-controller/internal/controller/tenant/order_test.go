package tenant_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// A reconcile writes independent objects concurrently, but never out of the order safety needs: in
// a new tenant namespace every role binding is created after the ResourceQuota and the network
// policies (nobody may create anything there before quota and isolation are in place), and the
// tenant is announced Ready only after all of them exist. Creation order is read from the
// resourceVersions that one etcd gave the objects as they were created.
func TestBindingsComeAfterQuotaAndIsolation(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxFor(t)
	rootTenant(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	// created["ns/kind/name"] is the resourceVersion at which the object was first seen.
	var mu sync.Mutex
	created := map[string]uint64{}
	readyAt := map[string]uint64{}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	record := func(list client.ObjectList, kind string) {
		w, err := wc.Watch(wctx, list)
		g.Expect(err).NotTo(HaveOccurred())
		wg.Go(func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				o, ok := ev.Object.(client.Object)
				ns := ""
				if ok {
					ns = o.GetNamespace()
					if _, isTenant := o.(*tenancyv1.Tenant); isTenant {
						ns = tenancy.OwnNamespace(client.ObjectKeyFromObject(o))
					}
				}
				if !ok || ev.Type == watch.Deleted || !strings.HasPrefix(ns, "tenant-ord") {
					continue
				}
				rv, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
				mu.Lock()
				if tn, ok := o.(*tenancyv1.Tenant); ok {
					if _, seen := readyAt[ns]; !seen && condition(tn, "Ready").Status == metav1.ConditionTrue {
						readyAt[ns] = rv
					}
				} else if key := o.GetNamespace() + "/" + kind + "/" + o.GetName(); created[key] == 0 {
					created[key] = rv
				}
				mu.Unlock()
			}
		})
	}
	record(&rbacv1.RoleBindingList{}, "rb")
	record(&corev1.ResourceQuotaList{}, "rq")
	record(&networkingv1.NetworkPolicyList{}, "np")
	record(&tenancyv1.TenantList{}, "tenant")

	// Siblings at once, and a child of each, so that several reconciles run side by side.
	var parents, kids []*tenancyv1.Tenant
	for i := range 3 {
		p := MakeTenant(fmt.Sprintf("ord%d", i), "tenant-root").Quota("cpu", "2").Quota("count/pods", "10").Obj()
		parents = append(parents, p)
		kids = append(kids, MakeTenant("kid", "tenant-"+p.Name).Quota("cpu", "1").Quota("count/pods", "5").Obj())
	}
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), parents...) })
	for _, p := range parents {
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	createAll(ctx, g, kids...)
	eventuallyCurrent(ctx, g, append(parents, kids...)...)
	time.Sleep(time.Second) // let the watches deliver the last events
	stop()
	wg.Wait()

	for _, tn := range append(parents, kids...) {
		ns := tenancy.OwnNamespace(client.ObjectKeyFromObject(tn))
		var fence, bindings uint64 // the last of quota and policies; the first binding
		var all uint64             // the last of them all
		for key, rv := range created {
			if !strings.HasPrefix(key, ns+"/") {
				continue
			}
			all = max(all, rv)
			switch strings.Split(key, "/")[1] {
			case "rq", "np":
				fence = max(fence, rv)
			case "rb":
				if bindings == 0 || rv < bindings {
					bindings = rv
				}
			}
		}
		g.Expect(fence).NotTo(BeZero(), "%s: no quota or network policy seen", ns)
		g.Expect(bindings).NotTo(BeZero(), "%s: no role binding seen", ns)
		g.Expect(bindings).To(BeNumerically(">", fence), "%s: a role binding was created before the quota and the policies: %v", ns, created)
		g.Expect(readyAt[ns]).To(BeNumerically(">", all), "%s: Ready before its objects", ns)
	}
}
