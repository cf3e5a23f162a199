package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/release"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/libs/testenv/node"
)

// The catalog's Redis serves on a real node: its image built here from Debian's packages
// (deploy/catalog/redis/image.yaml) and pulled from the registry the platform sets, its chart as
// the catalog ships it. A pod connects by the Service's name with the password of the app's
// Secret and is answered; without the password it is refused; what it wrote is still there after
// the server's pod is deleted and comes back.
func TestCatalogRedisServes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (network namespaces, cgroups, mounts): CI runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	spec, err := release.ReadDebImageSpec(filepath.Join(repo, "deploy", "catalog", "redis", "image.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	debs, err := release.FetchDebs(ctx, repo, spec)
	if err != nil {
		t.Fatal(err)
	}
	img, err := release.DebImage(spec, debs, node.Platform, release.Meta{Version: "0.0.0", Revision: "test", Created: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}

	env, err := testenv.Start(testenv.Options{Node: true, ControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	if _, err := env.StartScheduler(t.TempDir(), testenv.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("NODE_DIR") // keeps the node's state and logs there, to debug a failure
	if dir == "" {
		dir = t.TempDir()
	}
	n, err := node.Start(ctx, env, node.Options{Dir: dir})
	if err != nil {
		dumpLogs(t, filepath.Join(dir, "logs"))
		t.Fatal(err)
	}
	defer n.Stop()
	defer func() {
		if t.Failed() {
			dumpLogs(t, filepath.Join(dir, "logs"))
		}
	}()

	// The platform's registry (here the node's), where the release puts the catalog's images.
	registry := n.Registry + "/flotilla"
	ref, err := name.ParseReference(registry+"/catalog-images/redis:"+spec.Tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})); err != nil {
		t.Fatal(err)
	}

	k8s := env.Client
	const ns, app = "shop", "cache"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	// Its data on the node's disk: a volume the claim of the chart's StatefulSet binds.
	data := filepath.Join(dir, "redis-data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, spec.User, spec.User); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "redis-data"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: data}},
	}}
	if err := k8s.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(repo, "deploy", "catalog", "redis", "chart")
	for _, o := range decodeAll(t, run(t, "helm", "template", app, chart, "--namespace", ns,
		"--set-json", `flotilla={"registry":"`+registry+`"}`)) {
		o.SetNamespace(ns)
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	server := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-0"}}
	ready(ctx, t, k8s, server, "")
	t.Logf("Redis %s runs on %s from %s", spec.Tag, n.Name, ref)

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	host := app + "." + ns + ".svc.cluster.local"
	ask := func(pod string, auth bool, args ...string) string {
		t.Helper()
		c := corev1.Container{Name: "cli", Image: ref.String(), Command: append([]string{"redis-cli", "-h", host}, args...)}
		if auth {
			c.Env = []corev1.EnvVar{{Name: "REDISCLI_AUTH", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: app + "-auth"}, Key: "password"}}}}
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}, Spec: restrictedPod(c)}
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p)
			return err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed), err
		}); err != nil {
			t.Fatalf("redis-cli %v in pod %s never ended: %v\n%s", args, pod, err, podStates(ctx, k8s, ns))
		}
		logs, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(logs))
	}
	if got := ask("ping", true, "ping"); got != "PONG" {
		t.Errorf("PING with the app's password: %q, want PONG", got)
	}
	if got := ask("stranger", false, "ping"); !strings.Contains(got, "NOAUTH") {
		t.Errorf("PING without a password: %q, want NOAUTH", got)
	}
	if got := ask("write", true, "set", "greeting", "hello"); got != "OK" {
		t.Fatalf("SET: %q, want OK", got)
	}

	// The server's pod deleted: the StatefulSet makes it anew on the same volume.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(server), server); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, server); err != nil {
		t.Fatal(err)
	}
	ready(ctx, t, k8s, server, string(server.UID))
	if got := ask("read", true, "get", "greeting"); got != "hello" {
		t.Errorf("GET after the server's pod came back: %q, want hello (its append-only file on the volume)", got)
	}
}

// ready waits until pod exists (as another pod than the one of UID old, if set) and is Ready.
func ready(ctx context.Context, t *testing.T, k8s client.Client, pod *corev1.Pod, old string) {
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
