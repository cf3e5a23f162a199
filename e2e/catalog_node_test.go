package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/release"
	"github.com/flotilla-dev/flotilla/libs/testenv/node"
)

// The catalog's apps serve on a real node: each image built here as a release builds it
// (deploy/catalog/<app>/image.yaml: Redis from Debian's packages, etcd from the Go modules the
// builder pins), pulled from the registry the platform sets, each chart as the catalog ships it,
// its data on the node's disk. Clients are pods that reach the app by its Service's name.
func TestCatalogAppsServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, n := startCatalogNode(ctx, t)

	t.Run("redis", func(t *testing.T) {
		const ns, app = "shop", "cache"
		image := c.install(t, "redis", ns, app)
		server := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-0"}}
		ready(ctx, t, c.k8s, server, "")
		c.serving(t, ns, app, 6379)
		t.Logf("Redis runs on %s from %s", n.Name, image)

		host := app + "." + ns + ".svc.cluster.local"
		cli := func(pod string, auth bool, args ...string) string {
			t.Helper()
			ctr := corev1.Container{Name: "cli", Image: image, Command: append([]string{"redis-cli", "-h", host}, args...)}
			if auth {
				ctr.Env = []corev1.EnvVar{secretEnv("REDISCLI_AUTH", app+"-auth", "password", false)}
			}
			return c.run(t, ns, pod, restrictedPod(ctr))
		}
		if got := cli("ping", true, "ping"); got != "PONG" {
			t.Errorf("PING with the app's password: %q, want PONG", got)
		}
		if got := cli("stranger", false, "ping"); !strings.Contains(got, "NOAUTH") {
			t.Errorf("PING without a password: %q, want NOAUTH", got)
		}
		if got := cli("write", true, "set", "greeting", "hello"); got != "OK" {
			t.Fatalf("SET: %q, want OK", got)
		}
		// The server's pod deleted: the StatefulSet makes it anew on the same volume.
		if err := c.k8s.Get(ctx, client.ObjectKeyFromObject(server), server); err != nil {
			t.Fatal(err)
		}
		if err := c.k8s.Delete(ctx, server); err != nil {
			t.Fatal(err)
		}
		ready(ctx, t, c.k8s, server, string(server.UID))
		c.serving(t, ns, app, 6379)
		if got := cli("read", true, "get", "greeting"); got != "hello" {
			t.Errorf("GET after the server's pod came back: %q, want hello (its append-only file on the volume)", got)
		}
	})

	t.Run("etcd", func(t *testing.T) {
		const ns, app = "tenant-acme", "etcd"
		image := c.install(t, "etcd", ns, app)
		for i := range 3 {
			ready(ctx, t, c.k8s, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("etcd-%d", i)}}, "")
		}
		// The chart's Job turns authentication on once the members formed their cluster.
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			job := &batchv1.Job{}
			err := c.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "etcd-auth"}, job)
			return err == nil && job.Status.Succeeded == 1, err
		}); err != nil {
			t.Fatalf("the etcd-auth Job did not succeed: %v\n%s", err, podStates(ctx, c.k8s, ns))
		}
		c.serving(t, ns, "etcd", 2379)
		t.Logf("etcd: three members on %s from %s", n.Name, image)

		etcdctl := func(pod string, withCert bool, args ...string) string {
			t.Helper()
			flags := []string{"--endpoints=https://etcd." + ns + ".svc:2379", "--cacert=/tls/ca.crt", "--command-timeout=10s"}
			if withCert {
				flags = append(flags, "--cert=/tls/tls.crt", "--key=/tls/tls.key")
			}
			ctr := corev1.Container{Name: "etcdctl", Image: image, Command: []string{"/usr/local/bin/etcdctl"}, Args: append(flags, args...),
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}}}
			return c.run(t, ns, pod, restrictedPod(ctr, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: "etcd-client"}}}))
		}
		if got := etcdctl("health", true, "endpoint", "health"); !strings.Contains(got, "is healthy") {
			t.Errorf("etcdctl endpoint health with the client certificate: %q, want healthy", got)
		}
		if got := etcdctl("put", true, "put", "/acme/greeting", "hello"); got != "OK" {
			t.Errorf("etcdctl put: %q, want OK", got)
		}
		if got := etcdctl("get", true, "get", "--print-value-only", "/acme/greeting"); got != "hello" {
			t.Errorf("etcdctl get: %q, want hello", got)
		}
		if got := etcdctl("stranger", false, "get", "/acme/greeting"); strings.Contains(got, "hello") {
			t.Errorf("etcdctl without a client certificate read %q: the members must require one", got)
		}
	})
}

// The catalog's Postgres on a real node: CloudNativePG's operator (built from the module
// libs/builder pins, installed from that module's own manifests) runs a PostgreSQL of the catalog's
// image (Debian's packages); a client pod connects with the credentials the operator hands the
// namespace, a stranger's password is refused, and the data outlives its pod.
func TestCatalogPostgresServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, n := startCatalogNode(ctx, t)
	c.postgresOperator(t)

	const ns, app = "shop", "pg-orders"
	t.Cleanup(func() {
		if t.Failed() {
			cluster := &unstructured.Unstructured{}
			cluster.SetAPIVersion("postgresql.cnpg.io/v1")
			cluster.SetKind("Cluster")
			_ = c.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: app}, cluster)
			status, _ := json.Marshal(cluster.Object["status"])
			t.Logf("Cluster %s/%s: %s\n%s\n%s", ns, app, status, podStates(context.Background(), c.k8s, ns), c.logs("cnpg-system", 40))
		}
	})
	image := c.install(t, "postgres", ns, app, "replicas=1")
	server := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-1"}}
	ready(ctx, t, c.k8s, server, "")
	c.serving(t, ns, app+"-rw", 5432)
	t.Logf("PostgreSQL runs on %s from %s", n.Name, image)

	// The operator's Secret <app>-app: the application user's credentials and URI.
	psql := func(pod, secret, sql string) string {
		t.Helper()
		ctr := corev1.Container{Name: "psql", Image: image, Command: []string{"psql", "$(DATABASE_URL)", "-tAc", sql},
			Env: []corev1.EnvVar{secretEnv("DATABASE_URL", secret, "uri", false), pgConnectTimeout}}
		return c.run(t, ns, pod, restrictedPod(ctr))
	}
	if got := psql("select", app+"-app", "select 1"); got != "1" {
		t.Errorf("select 1 with the app's credentials: %q, want 1", got)
	}
	if err := c.k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger"},
		StringData: map[string]string{"uri": "postgresql://app:guessed@" + app + "-rw." + ns + ":5432/app"}}); err != nil {
		t.Fatal(err)
	}
	if got := psql("stranger", "stranger", "select 1"); !strings.Contains(got, "password authentication failed") {
		t.Errorf("select 1 with a guessed password: %q, want the password refused", got)
	}
	if got := psql("write", app+"-app", "create table greetings (word text); insert into greetings values ('hello')"); got != "CREATE TABLE\nINSERT 0 1" {
		t.Fatalf("insert: %q", got)
	}
	// The server's pod deleted: the operator makes it anew on the same volume.
	if err := c.k8s.Get(ctx, client.ObjectKeyFromObject(server), server); err != nil {
		t.Fatal(err)
	}
	if err := c.k8s.Delete(ctx, server); err != nil {
		t.Fatal(err)
	}
	ready(ctx, t, c.k8s, server, string(server.UID))
	c.serving(t, ns, app+"-rw", 5432)
	if got := psql("read", app+"-app", "select word from greetings"); got != "hello" {
		t.Errorf("select after the server's pod came back: %q, want hello", got)
	}
}

// postgresOperator installs CloudNativePG's operator as a release renders it into the GitOps tree
// (deploy/operators/cnpg), its image built here and pulled from the node's registry, and waits
// until its admission webhooks answer.
func (c catalogNode) postgresOperator(t testing.TB) {
	t.Helper()
	ref := c.push(t, filepath.Join(repo, "deploy", "operators", "cnpg", "image.yaml"))
	manifests, err := release.OperatorManifests(c.ctx, repo, filepath.Join(repo, "deploy", "operators", "cnpg"), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range decodeAll(t, manifests) {
		if err := c.k8s.Apply(c.ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("e2e"), client.ForceOwnership); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	probe := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"name": "probe", "namespace": "cnpg-system"},
		"spec":     map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"}}}}
	var last error
	if err := wait.PollUntilContextTimeout(c.ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = c.k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("CloudNativePG's webhooks never answered: %v\n%s", last, podStates(c.ctx, c.k8s, "cnpg-system"))
	}
}

// secretEnv is an environment variable from a Secret's key.
func secretEnv(name, secret, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: &optional}}}
}

// pgConnectTimeout makes PostgreSQL's clients give a connection up after 5 s: a server still
// starting may leave one unanswered, and a client would wait for minutes.
var pgConnectTimeout = corev1.EnvVar{Name: "PGCONNECT_TIMEOUT", Value: "5"}

// logs is the end of the logs of each pod in ns, to explain a failure.
func (c catalogNode) logs(ns string, lines int64) string {
	pods := &corev1.PodList{}
	if err := c.k8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		raw, err := c.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(context.Background())
		fmt.Fprintf(&b, "--- %s/%s (%v)\n%s\n", ns, p.Name, err, raw)
	}
	return b.String()
}

// startCatalogNode starts a real node (startNode) with volumes on its disk (the class local-path),
// and what installs the catalog's apps there.
func startCatalogNode(ctx context.Context, t testing.TB) (catalogNode, *node.Node) {
	t.Helper()
	env, n, _ := startNode(ctx, t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.StartLocalVolumes(ctx); err != nil {
		t.Fatal(err)
	}
	return catalogNode{ctx: ctx, k8s: env.Client, cs: cs, registry: n.Registry + "/flotilla"}, n
}

// catalogNode installs the catalog's apps on a real node.
type catalogNode struct {
	ctx      context.Context
	k8s      client.Client
	cs       kubernetes.Interface
	registry string // the platform's registry (here the node's), as flotilla.registry
}

// push builds the image of spec (an image.yaml) as a release builds it and pushes it to the node's
// registry. It returns the image's reference.
func (c catalogNode) push(t testing.TB, file string) string {
	t.Helper()
	spec, err := release.ReadCatalogImageSpec(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := release.BuildCatalogImage(c.ctx, repo, spec, node.Platform, t.TempDir(), release.Meta{Version: "0.0.0", Created: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(c.registry+"/"+release.CatalogImages+"/"+spec.Name+":"+spec.Tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(c.ctx)); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// install pushes the app's image (push) and installs its chart rendered as the platform renders
// it (its Helm release named helmName, in namespace ns, restricted, with the customer's values
// set), its volumes on the node's disk (the tenant's choice of the class local-path). It returns
// the image's reference.
func (c catalogNode) install(t testing.TB, app, ns, helmName string, set ...string) string {
	t.Helper()
	ref := c.push(t, filepath.Join(repo, "deploy", "catalog", app, "image.yaml"))
	if err := c.k8s.Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(repo, "deploy", "catalog", app, "chart")
	args := []string{"template", helmName, chart, "--namespace", ns,
		"--set", "storage.storageClass=" + node.LocalVolumes, "--set-json", `flotilla={"registry":"` + c.registry + `"}`}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	for _, o := range decodeAll(t, run(t, "helm", args...)) {
		o.SetNamespace(ns)
		if err := c.k8s.Create(c.ctx, o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	return ref
}

// serving waits until the Service's address answers on port from the machine: kube-proxy has the
// endpoints of pods that just became Ready a moment after they did.
func (c catalogNode) serving(t testing.TB, ns, name string, port int) {
	t.Helper()
	svc := &corev1.Service{}
	if err := c.k8s.Get(c.ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(port))
	if err := wait.PollUntilContextTimeout(c.ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("Service %s/%s (%s) does not answer: %v", ns, name, addr, err)
	}
}

// run runs a pod to its end, deletes it and returns what it printed.
func (c catalogNode) run(t testing.TB, ns, name string, spec corev1.PodSpec) string {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := c.k8s.Create(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(c.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.k8s.Get(ctx, client.ObjectKeyFromObject(p), p)
		return err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed), err
	}); err != nil {
		t.Fatalf("pod %s/%s never ended: %v\n%s", ns, name, err, podStates(c.ctx, c.k8s, ns))
	}
	logs, err := c.cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Gone, so that a tenant's pod quota does not fill with ended pods.
	if err := c.k8s.Delete(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(logs))
}

// ready waits until pod exists (as another pod than the one of UID old, if set) and is Ready.
func ready(ctx context.Context, t testing.TB, k8s client.Client, pod *corev1.Pod, old string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if string(pod.UID) == old {
			return false, nil
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not Ready: %v\n%s", pod.Namespace, pod.Name, err, podStates(ctx, k8s, pod.Namespace))
	}
}
