package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// matrixSubject is one identity of a tenant, as kube-apiserver knows it.
type matrixSubject struct {
	name   string
	user   string
	groups []string
}

// matrixVerbs are the verbs asked of every resource that serves them.
var matrixVerbs = []string{"get", "list", "create", "update", "delete"}

// readLike are the kinds whose create reads or reviews and writes nothing: any signed-in user may.
var readLike = map[string]bool{
	"authorization.k8s.io/selfsubjectaccessreviews": true, "authorization.k8s.io/selfsubjectrulesreviews": true,
	"authentication.k8s.io/selfsubjectreviews": true,
	"usage.flotilla.dev/usagereports":          true, // a report of the tenant's own usage, computed on create
}

// impersonationMatrix asks kube-apiserver (SubjectAccessReview) what each identity of tenant acme
// may do with every resource the platform serves (discovery: built-in kinds, CRDs and the
// aggregated apps and usage APIs), in its own namespace, its delivery namespace, its sibling's and
// the platform's, and at cluster scope; prints the matrix (every allowed cell) and fails where it
// crosses a boundary:
//   - nobody reaches the sibling tenant's namespace or the platform's;
//   - the viewer writes nothing (readLike aside);
//   - the tenant's users never reach its delivery namespace, and an app's identity writes there
//     only Helm's release records (Secrets);
//   - nobody writes a cluster-scoped object (readLike aside).
func impersonationMatrix(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	// The tenant-controller's names: a tenant's delivery namespace (tenancyv1.DeliveryNamespace),
	// and in it the identity of acme's Redis "sessions" (customersOrderApps), named like its
	// HelmRelease. Every app's identity holds the same roles (tenancyv1.DeliveryGroup); the
	// admission policy that holds each to its own release's objects is tried by the services'
	// attack tests, not here (a SubjectAccessReview asks RBAC only).
	const own, delivery, sibling, platform = "tenant-acme", "apps-acme", "tenant-beta", "flotilla-system"
	const deliveryIdentity = "redis-sessions"
	authenticated := "system:authenticated"
	subjects := []matrixSubject{
		{"admin", "admin@acme.example", []string{"tenant-acme-admin", authenticated}},
		{"viewer", "viewer@acme.example", []string{"tenant-acme-view", authenticated}},
		{"app", "system:serviceaccount:" + delivery + ":" + deliveryIdentity,
			[]string{"system:serviceaccounts", "system:serviceaccounts:" + delivery, authenticated}},
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type cell struct {
		subject   matrixSubject
		resource  string // group/resource ("" group: the core)
		namespace string // "" for cluster scope
		verb      string
		allowed   bool
	}
	var cells []*cell
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			namespaces := []string{""}
			if r.Namespaced {
				namespaces = []string{own, delivery, sibling, platform}
			}
			for _, verb := range matrixVerbs {
				if !slices.Contains(r.Verbs, verb) {
					continue
				}
				for _, ns := range namespaces {
					for _, s := range subjects {
						cells = append(cells, &cell{subject: s, resource: gv.Group + "/" + r.Name, namespace: ns, verb: verb})
					}
				}
			}
		}
	}
	var wg sync.WaitGroup
	work := make(chan *cell)
	errs := make(chan error, len(cells))
	for range 8 {
		wg.Go(func() {
			for c := range work {
				group, resource, _ := strings.Cut(c.resource, "/")
				review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
					Spec: authorizationv1.SubjectAccessReviewSpec{User: c.subject.user, Groups: c.subject.groups,
						ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.namespace, Verb: c.verb, Group: group, Resource: resource}},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					continue
				}
				c.allowed = review.Status.Allowed
			}
		})
	}
	for _, c := range cells {
		work <- c
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("SubjectAccessReview: %v", err)
	}

	// The matrix: per resource and namespace, what each identity may (g l c u d), allowed cells only.
	type row struct{ resource, namespace string }
	allowed := map[row]map[string]string{}
	var rows []row
	for _, c := range cells {
		if !c.allowed {
			continue
		}
		r := row{c.resource, c.namespace}
		if allowed[r] == nil {
			allowed[r] = map[string]string{}
			rows = append(rows, r)
		}
		allowed[r][c.subject.name] += c.verb[:1]
		write := c.verb == "create" || c.verb == "update" || c.verb == "delete"
		var crossed string
		switch {
		case c.namespace == sibling || c.namespace == platform:
			crossed = "reaches another tenant's or the platform's namespace"
		case readLike[strings.TrimPrefix(c.resource, "/")]:
		case c.namespace == "" && write:
			crossed = "writes a cluster-scoped object"
		case c.subject.name == "viewer" && write:
			crossed = "writes as a viewer"
		case c.namespace == delivery && c.subject.name != "app":
			crossed = "reaches the tenant's delivery namespace"
		case c.namespace == delivery && write && c.resource != "/secrets":
			crossed = "writes in its delivery namespace beyond Helm's release records"
		}
		if crossed != "" {
			t.Errorf("acme's %s %s: may %s %s in %q", c.subject.name, crossed, c.verb, c.resource, c.namespace)
		}
	}
	// Every kind acme's admin may create in its namespace has an object count there (the
	// tenant-controller chart's objectCounts), unless an aggregated API server stores it and caps
	// it itself (apps.flotilla.dev: each definition's maximum per tenant) or it is not stored at all.
	var creatable []string
	for _, c := range cells {
		if c.allowed && c.subject.name == "admin" && c.namespace == own && c.verb == "create" {
			creatable = append(creatable, c.resource)
		}
	}
	uncounted(ctx, t, cs, own, creatable)
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.resource+" "+a.namespace, b.resource+" "+b.namespace) })
	var b strings.Builder
	fmt.Fprintf(&b, "what acme's identities may do, of %d questions (g get, l list, c create, u update, d delete; allowed cells only; every other cell is refused):\n", len(cells))
	fmt.Fprintf(&b, "  %-58s %-18s %-6s %-6s %s\n", "RESOURCE", "NAMESPACE", "ADMIN", "VIEWER", "APP redis-sessions")
	for _, r := range rows {
		ns := r.namespace
		if ns == "" {
			ns = "(cluster)"
		}
		a := allowed[r]
		fmt.Fprintf(&b, "  %-58s %-18s %-6s %-6s %s\n", strings.TrimPrefix(r.resource, "/"), ns, a["admin"], a["viewer"], a["app"])
	}
	t.Log(b.String())
}

// uncounted fails for each of resources (group/resource) that the tenant namespace ns's quota does
// not count, except those an aggregated API server serves or that are only ever read (readLike).
func uncounted(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, resources []string) {
	t.Helper()
	rq, err := cs.CoreV1().ResourceQuotas(ns).Get(ctx, "flotilla-tenant", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the quota of %s: %v", ns, err)
	}
	lists, err := cs.Discovery().ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		t.Fatal(err)
	}
	version := map[string]string{} // group: its preferred version
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		version[gv.Group] = gv.Version
	}
	var missing []string
	for _, r := range resources {
		group, resource, _ := strings.Cut(r, "/")
		if readLike[strings.TrimPrefix(r, "/")] {
			continue
		}
		count := "count/" + resource
		if group != "" {
			count += "." + group
			var svc struct {
				Spec struct {
					Service *struct{} `json:"service"`
				} `json:"spec"`
			}
			raw, err := cs.Discovery().RESTClient().Get().
				AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/" + version[group] + "." + group).DoRaw(ctx)
			if err != nil || json.Unmarshal(raw, &svc) != nil {
				t.Fatalf("the APIService of %s: %v", group, err)
			}
			if svc.Spec.Service != nil {
				continue
			}
		}
		if _, ok := rq.Spec.Hard[corev1.ResourceName(count)]; !ok {
			missing = append(missing, count)
		}
	}
	if len(missing) > 0 {
		t.Errorf("a tenant admin may create kinds whose number nothing caps in %s (add them to the tenant-controller chart's objectCounts): %s",
			ns, strings.Join(missing, ", "))
	}
}

// platformSecretReach asks kube-apiserver (SubjectAccessReview) where the platform's own
// ServiceAccounts (those of the release namespace, flotilla-system) may read Secrets, and fails if
// any may list, watch or get them at cluster scope, or if the cluster-controller may read them
// outside tenant namespaces or may not read them in acme's, where the tenant-controller binds its
// chart's role (namespaceGrants).
func platformSecretReach(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const platform = "flotilla-system"
	sas, err := cs.CoreV1().ServiceAccounts(platform).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	may := func(sa, ns, verb string) bool {
		review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "system:serviceaccount:" + platform + ":" + sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + platform, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "secrets"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return review.Status.Allowed
	}
	found := false
	for _, sa := range sas.Items {
		for _, verb := range []string{"get", "list", "watch"} {
			if may(sa.Name, "", verb) {
				t.Errorf("ServiceAccount %s/%s may %s Secrets across the cluster", platform, sa.Name, verb)
			}
		}
		if sa.Name != "cluster-controller" {
			continue
		}
		found = true
		if !may(sa.Name, "tenant-acme", "get") {
			t.Errorf("the cluster-controller may not read the kubeconfig Secrets of acme's clusters in tenant-acme (the tenant-controller's namespaceGrants)")
		}
		for _, ns := range []string{platform, "flux-system", "kube-system", "apps-acme"} {
			if may(sa.Name, ns, "get") {
				t.Errorf("the cluster-controller may read Secrets in %s, which is no tenant namespace", ns)
			}
		}
		t.Logf("the cluster-controller reads Secrets in tenant-acme, not in %s, flux-system, kube-system or apps-acme, and lists them nowhere", platform)
	}
	if !found {
		t.Errorf("no ServiceAccount cluster-controller in %s", platform)
	}
}
