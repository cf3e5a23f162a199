package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/release"
	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// BenchmarkCatalogAppsServe measures how long a tenant waits for the catalog's Postgres (one
// instance) and Redis: from its admin's create through the apps API to the first answer a pod of
// the tenant's gets with the credentials the app's status names (select 1; PING). The platform is
// installed from its release onto a real node (TestAirGappedInstall's way, CloudNativePG's operator
// from the GitOps tree), the tenants made as customersOrderApps makes them. Each client pod tries
// for up to 20 s (a new pod's packets are refused until kube-router has seen it), new pods until
// one is answered; the baseline is a pod alone, run to its end from the same image. With BENCH_OUT it writes the "catalog-apps-serve" section of docs/benchmarks.md.
// Needs root.
func BenchmarkCatalogAppsServe(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a real node needs root")
	}
	const rounds = 5
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bundle := buildRelease(ctx, b, "1.0.0")
	c := startAirGapped(ctx, b, b.TempDir(), "")
	defer c.stop()
	loadBundle(ctx, b, bundle, c.mirror, c.push)
	c.commitBootstrap(ctx, b, "1.0.0")
	installed(ctx, b, c.env.Client, bundle, c.mirror, "1.0.0")
	acme, _ := customers(ctx, b, c)
	const ns = "tenant-acme"
	images := map[string]string{}
	for _, a := range bundle.Artifacts {
		if name, ok := strings.CutPrefix(a.Repository, release.CatalogImages+"/"); ok {
			d, _ := a.Digest()
			images[name] = c.mirror + "/" + a.Repository + "@" + d.String()
		}
	}
	// A pod of acme's from an app's image with its credentials at hand (an optional Secret's key).
	clientPod := func(app, name string, secret, key string, command ...string) string {
		ctr := corev1.Container{Name: "client", Image: images[app], Command: command, Env: []corev1.EnvVar{secretEnv("SECRET", secret, key, true)}}
		if app == "postgres" {
			ctr.Env = append(ctr.Env, pgConnectTimeout)
		}
		return acme.run(b, ns, name, restrictedPod(ctr))
	}
	// firstAnswer tries the client until it prints want; the time from t0.
	firstAnswer := func(t0 time.Time, try func(i int) string, want string) time.Duration {
		for i := 0; ; i++ {
			if got := try(i); got == want {
				return time.Since(t0)
			}
			if ctx.Err() != nil {
				b.Fatalf("no answer %q", want)
			}
		}
	}
	// exists waits until acme's object of that name exists. A client asks only then: a Service's
	// name asked for before is cached as missing by CoreDNS (up to 30 s).
	exists := func(o client.Object, name string) {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := acme.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)
			return err == nil, client.IgnoreNotFound(err)
		}); err != nil {
			b.Fatal(err)
		}
	}
	// readyAt reports, on the channel it returns, when the app was first Ready (what a tenant's
	// kubectl wait --for=condition=Ready waits for), measured from t0 while its clients try it.
	readyAt := func(t0 time.Time, order *unstructured.Unstructured) <-chan time.Duration {
		at := make(chan time.Duration, 1)
		go func() {
			app := order.DeepCopy()
			_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
				if err := acme.k8s.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
					return false, nil
				}
				conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
				return slices.ContainsFunc(conds, func(c any) bool {
					m, _ := c.(map[string]any)
					return m["type"] == "Ready" && m["status"] == "True"
				}), nil
			})
			at <- time.Since(t0)
		}()
		return at
	}
	baseline := map[string][]time.Duration{}
	served := map[string][]time.Duration{}
	ready := map[string][]time.Duration{}
	for r := range rounds {
		for _, kind := range []string{"Postgres", "Redis"} {
			spec := map[string]any{"storage": map[string]any{"size": "1Gi", "storageClass": "local-path"}, "volumePolicy": "Delete"}
			if kind == "Postgres" {
				spec["replicas"] = int64(1)
			}
			order := app("apps.flotilla.dev/v1alpha1", kind, ns, fmt.Sprintf("bench-%d", r), spec)
			t0 := time.Now()
			if err := acme.k8s.Create(ctx, order); err != nil {
				b.Fatal(err)
			}
			readied := readyAt(t0, order)
			name, _, _ := unstructured.NestedString(order.Object, "status", "releaseName")
			pod := func(i int) string { return fmt.Sprintf("client-%s-%d", name, i) }
			switch kind {
			case "Postgres":
				served["postgres"] = append(served["postgres"], firstAnswer(t0, func(i int) string {
					exists(&corev1.Secret{}, name+"-app")
					exists(&corev1.Service{}, name+"-rw")
					return clientPod("postgres", pod(i), name+"-app", "uri", retrying(`psql "$SECRET" -tAc "select 1"`, "1")...)
				}, "1"))
				t1 := time.Now()
				clientPod("postgres", pod(1000), name+"-app", "uri", "psql", "--version")
				baseline["postgres"] = append(baseline["postgres"], time.Since(t1))
			case "Redis":
				served["redis"] = append(served["redis"], firstAnswer(t0, func(i int) string {
					exists(&corev1.Service{}, name)
					return clientPod("redis", pod(i), name+"-auth", "password", retrying(`redis-cli --no-auth-warning -a "$SECRET" -h `+name+` ping`, "PONG")...)
				}, "PONG"))
				t1 := time.Now()
				clientPod("redis", pod(1000), name+"-auth", "password", "redis-cli", "--version")
				baseline["redis"] = append(baseline["redis"], time.Since(t1))
			}
			ready[strings.ToLower(kind)] = append(ready[strings.ToLower(kind)], <-readied)
			if err := acme.k8s.Delete(ctx, order); err != nil {
				b.Fatal(err)
			}
		}
	}
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	var body strings.Builder
	fmt.Fprintf(&body, `## A tenant's apps serve on a real node (%d rounds each, warm)

The platform installed from its release onto a real node (the air-gapped way, CloudNativePG's
operator from the GitOps tree, the catalog's images from the mirror). Each round, tenant acme's
admin creates the app through the apps API (volumes on the node's disk) and a pod of acme's tries
it with the credentials the app's status names, every second for up to 20 s (kube-router refuses a
new pod's packets until it has seen the pod, as for any customer's pod), new pods until one is
answered, once the app's Secret and Service exist (a name asked for before is cached as missing by
CoreDNS for up to 30 s): PostgreSQL (one instance) `+"`select 1`"+` with the operator's
`+"`<release>-app`"+` URI, Redis `+"`PING`"+` with its password. The clock runs from the tenant's create: the apps apiserver, Flux's helm-controller, the
operator and the kubelet are all in it. The baseline is one such client pod alone, run to its end.
Beside it, from the same create: the app Ready (what `+"`kubectl wait --for=condition=Ready`"+` waits for;
the starter apps are Ready once their StatefulSets' replicas, or CloudNativePG's Cluster, are), polled every 0.2 s.

| app | tenant's create → first answer: p50 | max | → app Ready: p50 | max | baseline (a client pod): p50 | first answer's p50 against the baseline |
|---|---|---|---|---|---|---|
`, rounds)
	for _, app := range []string{"postgres", "redis"} {
		fmt.Fprintf(&body, "| %s | %s | %s | %s | %s | %s | %.1f× |\n", app, s(testenv.Median(served[app])), s(slices.Max(served[app])),
			s(testenv.Median(ready[app])), s(slices.Max(ready[app])),
			s(testenv.Median(baseline[app])), testenv.Median(served[app]).Seconds()/testenv.Median(baseline[app]).Seconds())
	}
	b.Log("\n" + body.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := testenv.WriteBenchSection(out, "catalog-apps-serve", body.String()); err != nil {
			b.Fatal(err)
		}
	}
}
