package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// BenchmarkCatalogAppsServe measures, on a real node with its images warm, how long the catalog's
// Postgres (one instance, CloudNativePG's operator running) and Redis take from their chart's
// objects created in a fresh namespace to the first answer a client pod gets with the credentials
// the app hands out (select 1; PING). Each answer is tried by a pod of its own until one succeeds,
// so the baseline is such a pod alone, run to its end from the same image. With BENCH_OUT it
// writes the "catalog-apps-serve" section of docs/benchmarks.md. Needs root.
func BenchmarkCatalogAppsServe(b *testing.B) {
	const rounds = 5
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, _ := startCatalogNode(ctx, b)
	c.postgresOperator(b)
	images := map[string]string{}
	for _, app := range []string{"postgres", "redis"} {
		images[app] = c.push(b, filepath.Join(repo, "deploy", "catalog", app, "image.yaml"))
	}
	// A client pod of an app's image with its credentials at hand (an optional Secret's key).
	clientPod := func(app, ns string, i int, secret, key string, command ...string) string {
		ctr := corev1.Container{Name: "client", Image: images[app], Command: command,
			Env: []corev1.EnvVar{{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: ptr.To(true)}}},
				{Name: "PGCONNECT_TIMEOUT", Value: "5"}}} // a server not up yet may leave a connection unanswered
		return c.run(b, ns, fmt.Sprintf("client-%d", i), restrictedPod(ctr))
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
	baseline := map[string][]time.Duration{}
	served := map[string][]time.Duration{}
	for r := range rounds {
		for _, app := range []string{"postgres", "redis"} {
			ns, name := fmt.Sprintf("%s-%d", app, r), map[string]string{"postgres": "pg-bench", "redis": "bench"}[app]
			t0 := time.Now()
			switch app {
			case "postgres":
				c.install(b, app, ns, name, "replicas=1", "storage.size=1Gi")
				served[app] = append(served[app], firstAnswer(t0, func(i int) string {
					if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
						err := c.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-app"}, &corev1.Secret{})
						return err == nil, client.IgnoreNotFound(err)
					}); err != nil {
						b.Fatal(err)
					}
					return clientPod(app, ns, i, name+"-app", "uri", "psql", "$(SECRET)", "-tAc", "select 1")
				}, "1"))
				t1 := time.Now()
				clientPod(app, ns, 1000, name+"-app", "uri", "psql", "--version")
				baseline[app] = append(baseline[app], time.Since(t1))
			case "redis":
				c.install(b, app, ns, name)
				served[app] = append(served[app], firstAnswer(t0, func(i int) string {
					return clientPod(app, ns, i, name+"-auth", "password", "sh", "-c", `REDISCLI_AUTH="$SECRET" redis-cli -h `+name+` ping`)
				}, "PONG"))
				t1 := time.Now()
				clientPod(app, ns, 1000, name+"-auth", "password", "redis-cli", "--version")
				baseline[app] = append(baseline[app], time.Since(t1))
			}
		}
	}
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	var body strings.Builder
	fmt.Fprintf(&body, `## The catalog's apps serve on a real node (%d rounds each, warm)

On a real node (libs/testenv/node) with the catalog's images in its registry and CloudNativePG's
operator running: each round creates the app's chart objects as the platform renders them (a
fresh namespace, restricted; volumes on the node's disk) and tries the app from a client pod of
its own image with the credentials the app hands out, a new pod per try, until one answers:
PostgreSQL (one instance) `+"`select 1`"+` with the operator's `+"`<name>-app`"+` URI, Redis `+"`PING`"+`
with its password. The baseline is one such client pod alone, run to its end. Through the apps API
a tenant's order adds the apps apiserver and Flux's helm-controller (a second or two in `+"`make demo`"+`).

| app | created → first answer: p50 | max | baseline (a client pod): p50 | p50 against the baseline |
|---|---|---|---|---|
`, rounds)
	for _, app := range []string{"postgres", "redis"} {
		fmt.Fprintf(&body, "| %s | %s | %s | %s | %.1f× |\n", app, s(testenv.Median(served[app])), s(slices.Max(served[app])),
			s(testenv.Median(baseline[app])), testenv.Median(served[app]).Seconds()/testenv.Median(baseline[app]).Seconds())
	}
	b.Log("\n" + body.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := testenv.WriteBenchSection(out, "catalog-apps-serve", body.String()); err != nil {
			b.Fatal(err)
		}
	}
}
