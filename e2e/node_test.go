package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/libs/testenv/node"
)

// A real node runs what is scheduled on it: containerd with runc starts a tenant's web server under
// the restricted Pod Security level from an image in the node's registry; another pod reaches it by
// its Service's DNS name (CoreDNS, kube-proxy); the machine reaches it by the Service's address,
// as kube-apiserver reaches a webhook; kube-apiserver reads its logs from the kubelet; a
// NetworkPolicy refuses the pods it does not admit (kube-router); nothing restarts.
func TestRealNodeRunsPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, n, _ := startNode(ctx, t)

	debs, err := testenv.NodeDebsRoot()
	if err != nil {
		t.Fatal(err)
	}
	busybox, err := n.PushImage(ctx, "busybox", map[string]string{"/bin/busybox": filepath.Join(debs, "bin", "busybox")}, "/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := n.PushProgram(ctx, "probe", "libs/testenv/node/probe")
	if err != nil {
		t.Fatal(err)
	}

	k8s := env.Client
	const ns = "shop"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: restrictedPod(corev1.Container{
			Name: "web", Image: busybox,
			Command: []string{"/bin/busybox", "sh", "-c",
				`echo "hello from $HOSTNAME" > /www/index.html && exec /bin/busybox httpd -f -p 8080 -h /www`},
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt(8080)}}, PeriodSeconds: 1},
			VolumeMounts:   []corev1.VolumeMount{{Name: "www", MountPath: "/www"}},
		}, corev1.Volume{Name: "www", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})},
	}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	for _, o := range []client.Object{web, svc} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(web), d)
		return err == nil && d.Status.AvailableReplicas == 1, err
	}); err != nil {
		t.Fatalf("the web server never became available: %v\n%s", err, podStates(ctx, k8s, ns))
	}

	// Another pod, by the Service's name; its logs through kube-apiserver and the kubelet.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(name, how string, labels map[string]string) (corev1.PodPhase, string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: restrictedPod(corev1.Container{
			Name: "get", Image: probe, Args: []string{how, "http://web.shop.svc.cluster.local/"},
		})}
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		if err := k8s.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			return err == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed), err
		}); err != nil {
			t.Fatalf("pod %s fetching http://web.shop.svc.cluster.local/ never ended: %v\n%s", name, err, podStates(ctx, k8s, ns))
		}
		logs, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("pod %s's logs through kube-apiserver and the kubelet: %v", name, err)
		}
		return pod.Status.Phase, string(logs)
	}
	if phase, logs := fetch("get", "get", nil); phase != corev1.PodSucceeded || !strings.Contains(logs, "hello from web-") {
		t.Fatalf("fetching http://web.shop.svc.cluster.local/ from a pod: %s, saying %q, want the web server's page\n%s", phase, logs, podStates(ctx, k8s, ns))
	}

	// The machine (where kube-apiserver runs), by the Service's address.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + svc.Spec.ClusterIP + "/")
	if err != nil {
		t.Fatalf("the Service's address from the machine: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.HasPrefix(string(body), "hello from web-") {
		t.Errorf("the machine fetched %q from %s, want the web server's page", body, svc.Spec.ClusterIP)
	}

	// NetworkPolicies hold on packets (kube-router): once the web server admits only pods labelled
	// access=web, a pod without the label is refused and one with it served. Until the policy is
	// applied a pod still gets through: a few tries, each a new pod.
	if err := k8s.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web-access", Namespace: ns}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: labels},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"access": "web"}}}}}},
	}}); err != nil {
		t.Fatal(err)
	}
	refused, tries := false, 0
	for ; tries < 10 && !refused; tries++ {
		phase, logs := fetch(fmt.Sprintf("denied-%d", tries), "get", nil)
		refused = phase == corev1.PodFailed && !strings.Contains(logs, "hello from")
	}
	if !refused {
		t.Errorf("a pod without access=web still reached the web server after 10 tries under its NetworkPolicy")
	}
	// kube-router admits a new pod once it has seen its address: a pod may ask before.
	t.Logf("the NetworkPolicy refused the %d. pod without access=web", tries)
	// kube-router admits a pod once it has seen its address: the pod asks until it is served.
	if phase, logs := fetch("allowed", "retry", map[string]string{"access": "web"}); phase != corev1.PodSucceeded || !strings.Contains(logs, "hello from web-") {
		t.Errorf("a pod with access=web under the web server's NetworkPolicy, asking for a minute: %s, saying %q, want the page", phase, logs)
	}

	// Nothing restarted, CoreDNS included.
	for _, namespace := range []string{ns, metav1.NamespaceSystem} {
		pods := &corev1.PodList{}
		if err := k8s.List(ctx, pods, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != n.Name {
				t.Errorf("pod %s/%s on %q, want node %s", p.Namespace, p.Name, p.Spec.NodeName, n.Name)
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.RestartCount > 0 {
					t.Errorf("container %s of %s/%s restarted %d times", c.Name, p.Namespace, p.Name, c.RestartCount)
				}
			}
		}
	}
	nodeObj := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: n.Name}, nodeObj); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s: kubelet %s, %s, %s", n.Name, nodeObj.Status.NodeInfo.KubeletVersion, nodeObj.Status.NodeInfo.ContainerRuntimeVersion, nodeObj.Status.NodeInfo.OSImage)
}

// startNode starts a control plane with kube-controller-manager and kube-scheduler, and a real
// node beside it, both stopped when the test ends (the node's logs printed if it failed). The test
// is skipped without root. NODE_DIR keeps the node's state and logs, to debug a failure.
func startNode(ctx context.Context, t testing.TB) (*testenv.Env, *node.Node, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (network namespaces, cgroups, mounts): CI runs as root")
	}
	env, err := testenv.Start(testenv.Options{Node: true, ControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if _, err := env.StartScheduler(t.TempDir(), testenv.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("NODE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	n, err := node.Start(ctx, env, node.Options{Dir: dir})
	if err != nil {
		dumpLogs(t, filepath.Join(dir, "logs"))
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, filepath.Join(dir, "logs"))
		}
	})
	return env, n, dir
}

// restrictedPod is a pod spec of c (and volumes) that the restricted Pod Security level admits.
func restrictedPod(c corev1.Container, volumes ...corev1.Volume) corev1.PodSpec {
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers:      []corev1.Container{c},
		Volumes:         volumes,
	}
}

// podStates says each pod's phase and its containers' waiting reasons, to explain a failure.
func podStates(ctx context.Context, k8s client.Client, ns string) string {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s: %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil {
				fmt.Fprintf(&b, " [%s: %s %s]", c.Name, w.Reason, w.Message)
			}
			if x := c.State.Terminated; x != nil {
				fmt.Fprintf(&b, " [%s: exit %d, %s %s]", c.Name, x.ExitCode, x.Reason, x.Message)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// dumpLogs logs the end of each log in dir.
func dumpLogs(t testing.TB, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		raw, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(raw) > 4000 {
			raw = raw[len(raw)-4000:]
		}
		t.Logf("--- %s (end)\n%s", e.Name(), raw)
	}
}
