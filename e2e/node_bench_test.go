package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/libs/testenv/node"
)

// BenchmarkNode measures, over a few rounds, how long a real node takes to join a fresh control
// plane (each step of node.Start) and to run a pod from the node's registry, against the control
// plane's own start in the same round; with BENCH_OUT it writes the "node" section of
// docs/benchmarks.md. Needs root.
func BenchmarkNode(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a real node needs root")
	}
	const rounds = 3
	var controlPlane, ready, dns, pod []time.Duration
	steps := map[string][]time.Duration{}
	var order []string
	for range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		t0 := time.Now()
		env, err := testenv.Start(testenv.Options{Node: true, ControllerManager: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.StartScheduler(b.TempDir(), testenv.SchedulerOptions{}); err != nil {
			b.Fatal(err)
		}
		controlPlane = append(controlPlane, time.Since(t0))
		n, err := node.Start(ctx, env, node.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		var sum time.Duration
		for _, s := range n.Steps {
			if len(steps[s.Name]) == 0 {
				order = append(order, s.Name)
			}
			steps[s.Name] = append(steps[s.Name], s.Took)
			sum += s.Took
			if s.Name == "Ready" {
				ready = append(ready, sum)
			}
		}
		dns = append(dns, sum)
		probe, err := n.PushProgram(ctx, "probe", "libs/testenv/node/probe")
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: metav1.NamespaceDefault}, Spec: restrictedPod(corev1.Container{
			Name: "serve", Image: probe, Args: []string{"serve", ":8080"},
		})}
		if err := env.Client.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		}); err != nil {
			b.Fatal(err)
		}
		pod = append(pod, time.Since(t1))
		n.Stop()
		_ = env.Stop()
		cancel()
	}
	ms := func(ds []time.Duration) string {
		return fmt.Sprintf("%.1f s", testenv.Median(ds).Seconds())
	}
	ratio := func(ds []time.Duration) string {
		return fmt.Sprintf("%.2f×", testenv.Median(ds).Seconds()/testenv.Median(controlPlane).Seconds())
	}
	var body strings.Builder
	fmt.Fprintf(&body, `## A real node: warm start (median of %d rounds)

A fresh control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) is the
baseline; then `+"`node.Start`"+` (libs/testenv/node) joins a real node to it: containerd 2.4 with runc,
kubelet and kube-proxy v1.37.2, CNI ptp, the node's registry and CoreDNS, every binary already built.

| what | median | against the control plane's start |
|---|---|---|
| the control plane started (baseline) | %s | 1.00× |
| the node Ready (from node.Start) | %s | %s |
| … and CoreDNS available (node.Start returns) | %s | %s |
| a pod created → Running (image pulled from the node's registry) | %s | %s |

node.Start's steps:

| step | median |
|---|---|
`, rounds, ms(controlPlane), ms(ready), ratio(ready), ms(dns), ratio(dns), ms(pod), ratio(pod))
	for _, name := range order {
		fmt.Fprintf(&body, "| %s | %s |\n", name, ms(steps[name]))
	}
	b.Log("\n" + body.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := testenv.WriteBenchSection(out, "node", body.String()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlatformOnNode measures how long the platform takes to install from its release onto a
// real node, the air-gapped way (TestAirGappedInstall's setup): the release built for this
// machine's platform once, then, each round on a fresh control plane and node, the bundle pushed to
// the mirror and the bootstrap objects committed, until every HelmRelease is Ready and every
// Flotilla pod runs Ready. The baseline is the same round's node: from node.Start to Ready. With
// BENCH_OUT it writes the "platform-on-node" section of docs/benchmarks.md. Needs root.
func BenchmarkPlatformOnNode(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a real node needs root")
	}
	const rounds = 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	t0 := time.Now()
	bundle := buildRelease(ctx, b, "1.0.0")
	built := time.Since(t0)
	var nodeReady, pushed, released, podsReady []time.Duration
	for range rounds {
		c := startAirGapped(ctx, b, b.TempDir(), "")
		var sum time.Duration
		for _, s := range c.node.Steps {
			if sum += s.Took; s.Name == "Ready" {
				nodeReady = append(nodeReady, sum)
			}
		}
		t1 := time.Now()
		loadBundle(ctx, b, bundle, c.mirror, c.push)
		pushed = append(pushed, time.Since(t1))
		t2 := time.Now()
		c.commitBootstrap(ctx, b, "1.0.0")
		installed(ctx, b, c.env.Client, bundle, c.mirror, "1.0.0")
		released = append(released, time.Since(t2))
		running(ctx, b, c.env.Client, c.node.Name)
		podsReady = append(podsReady, time.Since(t2))
		c.stop()
	}
	s := func(ds ...time.Duration) string { return fmt.Sprintf("%.1f s", testenv.Median(ds).Seconds()) }
	ratio := func(ds []time.Duration) string {
		return fmt.Sprintf("%.1f×", testenv.Median(ds).Seconds()/testenv.Median(nodeReady).Seconds())
	}
	body := fmt.Sprintf(`## The platform installed from its release onto a real node (median of %d rounds)

What `+"`make demo`"+` does once its node is Ready, and a provider without internet access does on day one:
the release (every service's image, chart and the GitOps tree) pushed to a registry mirror on the
node's link, the bootstrap objects of deploy/flux/clusters/production committed, and the real
source-, kustomize- and helm-controller installing it while containerd pulls every image by digest.
The baseline is the same round's node, from node.Start to Ready.

| what | median | against the node's start |
|---|---|---|
| the node Ready (baseline) | %s | 1.0× |
| the bundle pushed to the mirror | %s | %s |
| bootstrap committed → every HelmRelease Ready | %s | %s |
| bootstrap committed → every Flotilla pod Running and Ready | %s | %s |

The release itself was built once beforehand in %s (Go build cache warm: every binary linked
anew, its images layered without a container engine).
`, rounds, s(nodeReady...), s(pushed...), ratio(pushed), s(released...), ratio(released), s(podsReady...), ratio(podsReady), s(built))
	b.Log("\n" + body)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := testenv.WriteBenchSection(out, "platform-on-node", body); err != nil {
			b.Fatal(err)
		}
	}
}
