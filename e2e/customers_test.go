package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// customersOrderApps: the platform installed from its release (TestAirGappedInstall's) serves its
// customers. The platform team makes tenants acme and beta; acme's admin, a user the platform knows
// only by an OIDC group, orders Postgres and Redis through the apps API from its own seat, with
// volumes on the node's disk. Each is Ready once its pods are, and answers a pod of acme's with
// the credentials its status names. A probe from a pod of beta's gets no answer from either, while
// the same probe from acme's pod, and from one of acme's child tenant dev, does. Deleted by acme's admin, each leaves what its volume policy says: Postgres (Retain) its
// volumes, released from the app, and nothing else; Redis (Delete) nothing. An app whose pods the
// tenant's LimitRange refuses says so in its status.
// (etcd is a tenant service the platform orders, and serves in TestCatalogAppsServe; the VM and
// Kubernetes kinds need a hypervisor.)
func customersOrderApps(ctx context.Context, t *testing.T, c *airGapped) {
	t.Helper()
	acme, beta := customers(ctx, t, c)
	platform := c.env.Client

	const ns = "tenant-acme"
	pg := app("apps.flotilla.dev/v1alpha1", "Postgres", ns, "orders", map[string]any{
		"replicas": int64(1), "storage": map[string]any{"size": "1Gi", "storageClass": "local-path"}})
	redis := app("apps.flotilla.dev/v1alpha1", "Redis", ns, "sessions", map[string]any{
		"storage": map[string]any{"size": "1Gi", "storageClass": "local-path"}, "volumePolicy": "Delete"})
	for _, a := range []*unstructured.Unstructured{pg, redis} {
		if err := acme.k8s.Create(ctx, a); err != nil {
			t.Fatalf("acme's admin orders %s %s: %v", a.GetKind(), a.GetName(), err)
		}
	}
	for _, a := range []*unstructured.Unstructured{pg, redis} {
		current(ctx, t, acme.k8s, a)
	}
	outputs := func(a *unstructured.Unstructured, kind string) string {
		list, _, _ := unstructured.NestedSlice(a.Object, "status", "outputs")
		for _, o := range list {
			if o, _ := o.(map[string]any); o["kind"] == kind {
				return o["name"].(string)
			}
		}
		t.Fatalf("%s %s names no %s in its status: %v", a.GetKind(), a.GetName(), kind, list)
		return ""
	}
	pgRelease, _, _ := unstructured.NestedString(pg.Object, "status", "releaseName")
	redisRelease, _, _ := unstructured.NestedString(redis.Object, "status", "releaseName")
	// An app is Ready once its pods are (its definition's readiness): no waiting here.
	image := func(pod string) string {
		p := &corev1.Pod{}
		if err := platform.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
			t.Fatalf("the pod %s of a Ready app: %v", pod, err)
		}
		if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			t.Errorf("the app of pod %s is Ready, the pod is not: %+v", pod, p.Status.Conditions)
		}
		return p.Spec.Containers[0].Image
	}
	pgImage, redisImage := image(pgRelease+"-1"), image(redisRelease+"-0")

	// acme's pods, with the credentials the apps' statuses name.
	pgHost, redisHost := outputs(pg, "Service")+"."+ns+".svc", outputs(redis, "Service")+"."+ns+".svc"
	if got := acme.run(t, ns, "psql", restrictedPod(corev1.Container{Name: "psql", Image: pgImage,
		Command: retrying(`psql "$DATABASE_URL" -tAc "select 1"`, "1"),
		Env:     []corev1.EnvVar{secretEnv("DATABASE_URL", outputs(pg, "Secret"), "uri", false), pgConnectTimeout}})); got != "1" {
		t.Errorf("acme's pod: select 1 with the Secret Postgres orders names: %q, want 1", got)
	}
	if got := acme.run(t, ns, "redis-cli", restrictedPod(corev1.Container{Name: "redis-cli", Image: redisImage,
		Command: retrying("redis-cli -h "+redisHost+" ping", "PONG"),
		Env:     []corev1.EnvVar{secretEnv("REDISCLI_AUTH", outputs(redis, "Secret"), "password", false)}})); got != "PONG" {
		t.Errorf("acme's pod: PING with the Secret Redis sessions names: %q, want PONG", got)
	}
	// The same probe from acme's pod and from beta's: a TCP connection that anything answers (a
	// PING the server does not understand still draws an error or a close). kube-router lets a
	// new pod's packets through a moment after it has seen the pod: each try is repeated.
	probe := func(s seatClient, ns string, tries int) string {
		script := fmt.Sprintf(`probe() { i=0; while [ $i -lt %d ]; do r=$(busybox timeout 3 redis-cli -h $1 -p $2 ping 2>&1 | busybox head -1)
  case $r in ""|"Could not connect"*) ;; *) echo "$1 answered: $r"; return;; esac; i=$((i+1)); busybox sleep 1; done; echo "$1 silent: $r"; }
probe %s 5432 & probe %s 6379 & wait`, tries, pgHost, redisHost)
		return s.run(t, ns, "probe", restrictedPod(corev1.Container{Name: "probe", Image: redisImage, Command: []string{"/bin/sh", "-c", script}}))
	}
	// acme's child tenant dev, made by acme's admin from its seat: its pods are of acme's line of
	// the tree, which acme's namespace lets in (a pod of dev's is run from acme's seat: an
	// ancestor's admin acts in its descendants' namespaces).
	dev := app("tenancy.flotilla.dev/v1alpha1", "Tenant", ns, "dev", map[string]any{
		"resourceQuotas": map[string]any{"requests.cpu": "1", "requests.memory": "1Gi", "count/pods": "5"}, "limitRange": limitRange})
	if err := acme.k8s.Create(ctx, dev); err != nil {
		t.Fatalf("acme's admin makes its child tenant dev: %v", err)
	}
	current(ctx, t, acme.k8s, dev)
	fromAcme, fromDev, fromBeta := probe(acme, ns, 20), probe(acme, "tenant-acme-dev", 20), probe(beta, "tenant-beta", 10)
	for _, host := range []string{pgHost, redisHost} {
		if !strings.Contains(fromAcme, host+" answered") {
			t.Errorf("acme's probe of its own %s: want an answer, got\n%s", host, fromAcme)
		}
		if !strings.Contains(fromDev, host+" answered") {
			t.Errorf("the probe of acme's child dev, of acme's %s: want an answer, got\n%s", host, fromDev)
		}
		if !strings.Contains(fromBeta, host+" silent") {
			t.Errorf("beta's probe of acme's %s: want no answer, got\n%s", host, fromBeta)
		}
	}

	// An app whose pods cannot be created is not Ready, and its status says why in the words of
	// what refused them (the tenant's LimitRange: a request above the default limit).
	toobig := app("apps.flotilla.dev/v1alpha1", "Redis", ns, "toobig", map[string]any{
		"storage": map[string]any{"storageClass": "local-path"}, "resources": map[string]any{"cpu": "8"}, "volumePolicy": "Delete"})
	ordered := time.Now()
	if err := acme.k8s.Create(ctx, toobig); err != nil {
		t.Fatal(err)
	}
	var message string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := acme.k8s.Get(ctx, client.ObjectKeyFromObject(toobig), toobig)
		message, _, _ = unstructured.NestedString(toobig.Object, "status", "message")
		return err == nil && strings.Contains(message, "cannot create its pods") && strings.Contains(message, "cpu limit"), err
	}); err != nil {
		t.Errorf("Redis toobig (cpu 8 against a LimitRange's 500m): status message %q, want why its pods cannot be created: %v", message, err)
	} else {
		t.Logf("Redis toobig not Ready %.1f s after acme's order: %s", time.Since(ordered).Seconds(), message)
	}

	// Deleted by acme's admin: what is left is what each volume policy says.
	for _, a := range []*unstructured.Unstructured{pg, redis, toobig} {
		if err := acme.k8s.Delete(ctx, a); err != nil {
			t.Fatalf("acme's admin deletes %s %s: %v", a.GetKind(), a.GetName(), err)
		}
	}
	leftovers := func(release string) (kinds []string, pvcs []corev1.PersistentVolumeClaim) {
		sel := client.MatchingLabels{"app.kubernetes.io/instance": release}
		for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.ServiceList{}, &corev1.SecretList{}, &corev1.PersistentVolumeClaimList{}} {
			if err := platform.List(ctx, list, client.InNamespace(ns), sel); err != nil {
				t.Fatal(err)
			}
			switch l := list.(type) {
			case *corev1.PodList:
				kinds = append(kinds, names("Pod", l.Items)...)
			case *corev1.ServiceList:
				kinds = append(kinds, names("Service", l.Items)...)
			case *corev1.SecretList:
				kinds = append(kinds, names("Secret", l.Items)...)
			case *corev1.PersistentVolumeClaimList:
				pvcs = l.Items
			}
		}
		return kinds, pvcs
	}
	var left []string
	var pgVolumes, redisVolumes []corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pgLeft, pvcs := leftovers(pgRelease)
		redisLeft, redisPVCs := leftovers(redisRelease)
		left, pgVolumes, redisVolumes = append(pgLeft, redisLeft...), pvcs, redisPVCs
		for _, a := range []*unstructured.Unstructured{pg, redis, toobig} {
			if err := acme.k8s.Get(ctx, client.ObjectKeyFromObject(a), a.DeepCopy()); err == nil {
				left = append(left, a.GetKind()+" "+a.GetName())
			}
		}
		return len(left) == 0 && len(redisVolumes) == 0, nil
	})
	if err != nil {
		t.Errorf("deleted apps left %v and Redis's volumes %v: %v", left, names("PersistentVolumeClaim", redisVolumes), err)
	}
	if len(pgVolumes) != 1 {
		t.Errorf("Postgres orders (volume policy Retain) left %d volumes, want its 1", len(pgVolumes))
	}
	for _, v := range pgVolumes {
		if v.Labels["apps.flotilla.dev/retained-from"] != "postgres.orders" || len(v.OwnerReferences) > 0 || v.DeletionTimestamp != nil {
			t.Errorf("Postgres orders' volume %s: labels %v, owners %v, deleting %v; want kept, marked retained from postgres.orders, owned by nothing",
				v.Name, v.Labels, v.OwnerReferences, v.DeletionTimestamp != nil)
		}
	}
}

// limitRange is the customers' tenants' default container resources.
var limitRange = map[string]any{"default": map[string]any{"cpu": "500m", "memory": "512Mi"}, "defaultRequest": map[string]any{"cpu": "50m", "memory": "64Mi"}}

// customers makes, as a platform team does, tenants acme and beta (with quotas and default
// resources, as a provider sells them) under the root tenant of the GitOps tree, and volumes on
// the node's disk (the class local-path); it returns their admins' seats.
func customers(ctx context.Context, t testing.TB, c *airGapped) (acme, beta seatClient) {
	t.Helper()
	if err := c.node.StartLocalVolumes(ctx); err != nil {
		t.Fatal(err)
	}
	platform := c.env.Client
	current(ctx, t, platform, app("tenancy.flotilla.dev/v1alpha1", "Tenant", "tenant-root", "root", nil))
	for _, name := range []string{"acme", "beta"} {
		tenant := app("tenancy.flotilla.dev/v1alpha1", "Tenant", "tenant-root", name, map[string]any{
			"resourceQuotas": map[string]any{"requests.cpu": "8", "requests.memory": "16Gi", "count/pods": "50"}, "limitRange": limitRange})
		if err := platform.Create(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		current(ctx, t, platform, tenant)
	}
	return seat(ctx, t, c, "admin@acme.example", "tenant-acme-admin"), seat(ctx, t, c, "admin@beta.example", "tenant-beta-admin")
}

// retrying is a container's command that runs command (a program and its arguments, in shell
// words) until it prints want, each try for at most 5 s, every second for 20 tries, and prints
// what it printed last. A new pod's first packets may be refused or dropped until kube-proxy and
// kube-router have seen the Service's endpoints and the pod, as they are for any customer's pod.
func retrying(command, want string) []string {
	return []string{"/bin/sh", "-c", `i=0; until out=$(busybox timeout 5 ` + command + ` 2>&1); [ "$out" = "` + want + `" ]; do i=$((i+1)); [ $i -lt 20 ] || break; busybox sleep 1; done; echo "$out"`}
}

// seatClient is a tenant's user as kube-apiserver knows it: a name and an OIDC group, impersonated.
type seatClient = catalogNode

func seat(ctx context.Context, t testing.TB, c *airGapped, user, group string) seatClient {
	t.Helper()
	cfg := rest.CopyConfig(c.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{group}}
	k8s, err := client.New(cfg, client.Options{Scheme: c.env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return seatClient{ctx: ctx, k8s: k8s, cs: cs}
}

// app is an object of a kind not in the scheme.
func app(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"namespace": ns, "name": name}}}
	if spec != nil {
		o.Object["spec"] = spec
	}
	return o
}

// current waits until o (read into o) has been reconciled at its generation and is Ready; it fails
// at once if o is stalled.
func current(ctx context.Context, t testing.TB, cl client.Client, o *unstructured.Unstructured) {
	t.Helper()
	var res *status.Result
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		var err error
		if res, err = testenv.KStatus(o); err != nil {
			return false, err
		}
		observed, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
		if res.Status == status.FailedStatus && observed == o.GetGeneration() {
			return false, fmt.Errorf("stalled: %s", res.Message)
		}
		return res.Status == status.CurrentStatus && observed == o.GetGeneration(), nil
	})
	if err != nil {
		t.Fatalf("%s %s/%s not Ready: %v (%+v)", o.GetKind(), o.GetNamespace(), o.GetName(), err, res)
	}
}

func names[T any, P interface {
	*T
	client.Object
}](kind string, items []T) []string {
	var out []string
	for i := range items {
		out = append(out, kind+" "+P(&items[i]).GetName())
	}
	return out
}
