package capitest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/localprovider"
)

// startProvider runs the local provider stand-in for Kamaji and KubeVirt, serving namespace ns
// only, with its control planes' state in a directory of the test; the test's end stops it and
// every kube-apiserver it started. It returns that directory.
func startProvider(t *testing.T, ns string) string {
	t.Helper()
	state := t.TempDir()
	t.Cleanup(runProvider(t, ns, state))
	return state
}

// runProvider runs the stand-in with its state in state until the returned stop is called; opts
// change its options.
func runProvider(t *testing.T, ns, state string, opts ...func(*localprovider.Options)) (stop func()) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Its namespace, and its clusters' infrastructure controllers in the platform's namespace.
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}, ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: {Namespaces: map[string]cache.Config{infraNamespace: {
				LabelSelector: labels.SelectorFromSet(labels.Set{clusterapi.LabelClusterNamespace: ns})}}},
			&corev1.Pod{}: {Namespaces: map[string]cache.Config{infraNamespace: {
				LabelSelector: labels.SelectorFromSet(labels.Set{clusterapi.LabelClusterNamespace: ns})}}},
		}},
		// Controller names are unique per process: each test's stand-in is its own.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &localprovider.Provider{Client: mgr.GetClient(), Options: localprovider.Options{
		KubeAPIServer:  filepath.Join(binDir, "kube-apiserver"),
		EtcdServers:    env.ControlPlane.Etcd.URL.String(),
		StateDir:       state,
		InfraNamespace: infraNamespace,
	}}
	for _, o := range opts {
		o(&p.Options)
	}
	if err := p.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
}

// customerKubeconfig reads the customer's kubeconfig from the Secret the cluster names in its
// status, and writes it to a file for kubectl.
func customerKubeconfig(t *testing.T, kc *clusterapi.KubernetesCluster) (string, client.Client) {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kc.Namespace, Name: kc.Status.KubeconfigSecretName}, s); err != nil {
		t.Fatal(err)
	}
	raw := s.Data[kubernetescluster.KubeconfigKey]
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return path, c
}

// kubectl runs the real kubectl with a kubeconfig and returns its output.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// watchConfigMaps watches the ConfigMaps of namespace ns in the customer's cluster at kubeconfig
// from now until the watch ends (its kube-apiserver stops); the function it returns waits for
// that end (up to two minutes) and returns the names of those deleted meanwhile.
func watchConfigMaps(t *testing.T, kubeconfig, ns string) func() map[string]bool {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	w, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	deleted, done := map[string]bool{}, make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Deleted {
				deleted[cm.Name] = true
			}
		}
	}()
	return func() map[string]bool {
		defer cancel()
		<-done
		return deleted
	}
}

// etcdKeys counts the keys under prefix in the platform's etcd, through etcd's JSON gateway.
func etcdKeys(t *testing.T, prefix string) int {
	t.Helper()
	end := []byte(prefix)
	end[len(end)-1]++
	body, _ := json.Marshal(map[string]any{"key": base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString(end), "count_only": true})
	resp, err := http.Post(strings.TrimSuffix(env.ControlPlane.Etcd.URL.String(), "/")+"/v3/kv/range", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Count string `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Count == "" {
		return 0 // etcd leaves out a zero count
	}
	n, err := strconv.Atoi(out.Count)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Where kube-controller-manager's Deployment controller runs (the demo with a real node), the
// stand-in plays only the kubelet of the clusters' infrastructure pods bound to a Node no kubelet
// runs: they report their containers running and ready. A pod on a Node a kubelet reports for is
// that kubelet's, and left alone.
func TestStandInPlaysTheKubeletOfInfraPodsOnNodesWithoutOne(t *testing.T) {
	ctx := context.Background()
	const ns = "infra-pods"
	t.Cleanup(runProvider(t, ns, t.TempDir(), func(o *localprovider.Options) { o.InfraPods = true }))
	if err := client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: infraNamespace}})); err != nil {
		t.Fatal(err)
	}
	standIn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stand-in-" + ns}}
	withKubelet := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-" + ns}}
	for _, n := range []*corev1.Node{standIn, withKubelet} {
		if err := k8s.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	withKubelet.Status.NodeInfo.KubeletVersion = "v1.37.2"
	if err := k8s.Status().Update(ctx, withKubelet); err != nil {
		t.Fatal(err)
	}
	pod := func(node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: infraNamespace, Name: "on-" + node, Labels: map[string]string{clusterapi.LabelClusterNamespace: ns}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
				{Name: "csi-driver", Image: "quay.io/kubevirt/kubevirt-csi-driver:v0.4.1"}, {Name: "csi-provisioner", Image: "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0"}}},
		}
	}
	kubelets, played := pod(withKubelet.Name), pod(standIn.Name)
	for _, p := range []*corev1.Pod{kubelets, played} { // the kubelet's first: looked at before the played one is done
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(played), played); err != nil {
			t.Fatal(err)
		}
		if played.Status.Phase == corev1.PodRunning && ready(played) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod on the Node no kubelet runs is not played running and ready: %+v", played.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(played.Status.ContainerStatuses); n != 2 || !played.Status.ContainerStatuses[1].Ready || played.Status.ContainerStatuses[1].State.Running == nil {
		t.Errorf("want both containers running and ready, got %+v", played.Status.ContainerStatuses)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(kubelets), kubelets); err != nil {
		t.Fatal(err)
	}
	if kubelets.Status.Phase == corev1.PodRunning || ready(kubelets) {
		t.Errorf("the stand-in played the kubelet of a pod on a Node a kubelet reports for: %+v", kubelets.Status)
	}
}
