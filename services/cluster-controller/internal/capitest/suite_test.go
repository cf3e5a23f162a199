package capitest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
)

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

var (
	// applies counts the controller's writes to owned objects; reconciles its finished reconciles.
	applies, reconciles atomic.Int64
	env                 *testenv.Env
	k8s                 client.Client
	logDir              string
	binDir              string
)

const (
	// infraNamespace is where the clusters' infrastructure controllers run, as the chart sets it.
	infraNamespace = "flotilla-cluster-infra"
	capiModule     = "sigs.k8s.io/cluster-api@v1.13.6"
	capkModule     = "sigs.k8s.io/cluster-api-provider-kubevirt@v0.11.2"
)

// contractLabels are the Cluster API contract labels the providers' kustomizations add.
var contractLabels = map[string]map[string]string{
	"kubevirtclusters.infrastructure.cluster.x-k8s.io":         {"cluster.x-k8s.io/v1beta1": "v1alpha1"},
	"kubevirtmachines.infrastructure.cluster.x-k8s.io":         {"cluster.x-k8s.io/v1beta1": "v1alpha1"},
	"kubevirtmachinetemplates.infrastructure.cluster.x-k8s.io": {"cluster.x-k8s.io/v1beta1": "v1alpha1"},
	"kamajicontrolplanes.controlplane.cluster.x-k8s.io":        {"cluster.x-k8s.io/v1beta2": "v1alpha2"},
	"kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io":        {"cluster.x-k8s.io/v1beta2": "v1beta2"},
	"kubeadmconfigs.bootstrap.cluster.x-k8s.io":                {"cluster.x-k8s.io/v1beta2": "v1beta2"},
}

func TestMain(m *testing.M) { testenv.Main(m, run) }

func run(m *testing.M) (int, error) {
	var err error
	if binDir, err = testenv.BinDir(); err != nil {
		return 0, err
	}
	for _, manager := range []string{"cluster-api-manager", "kubeadm-bootstrap-manager"} {
		if _, err := os.Stat(filepath.Join(binDir, manager)); err != nil {
			return 0, fmt.Errorf("%s is not built (run make tools): %w", manager, err)
		}
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = clusterapi.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	dirs, err := testenv.ModuleCRDDirs(append([]string{capiModule, capkModule}, testenv.FluxModules...)...)
	if err != nil {
		return 0, err
	}
	kubeadm := filepath.Join(dirs[0], "..", "..", "..", "bootstrap", "kubeadm", "config", "crd", "bases")
	chart := filepath.Join("..", "..", "..", "..", "deploy", "charts", "cluster-controller", "crds")
	kamaji := filepath.Join("..", "..", "test", "crds", "kamaji")
	env, err = testenv.Start(testenv.Options{CRDDirs: append(dirs, kubeadm, kamaji, chart), Scheme: scheme, ControllerManager: true})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, labels := range contractLabels {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
			return 0, err
		}
		p := client.MergeFrom(crd.DeepCopy())
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		for k, v := range labels {
			crd.Labels[k] = v
		}
		if err := k8s.Patch(ctx, crd, p); err != nil {
			return 0, err
		}
	}

	// The tenant roles as the tenant-controller ships them, and the cluster-controller's policy
	// guarding Cluster API's Secrets, as the charts install them.
	for _, f := range []string{filepath.Join(chart, "..", "..", "tenant-controller", "templates", "tenant-roles.yaml"),
		filepath.Join(chart, "..", "templates", "cluster-secrets-policy.yaml"),
		filepath.Join(chart, "..", "templates", "finalizer-policy.yaml"),
		filepath.Join(chart, "..", "templates", "infra-clusterrole.yaml")} {
		if err := testenv.ApplyFile(ctx, k8s, f); err != nil {
			return 0, err
		}
	}
	// kube-apiserver applies the finalizer policy moments after it is created, and answers 503 to
	// creates until its admission knows the CRD's schema.
	probe := func() client.Object { return smallCluster("default", "probe", 1, 1) }
	if err := testenv.WaitAdmitted(ctx, k8s, probe, kubernetescluster.HasFinalizer); err != nil {
		return 0, err
	}

	if logDir, err = os.MkdirTemp("", "capi-test-"); err != nil {
		return 0, err
	}
	defer func() {
		if os.Getenv("KEEP_LOGS") == "" {
			_ = os.RemoveAll(logDir)
		}
	}()
	certs := filepath.Join(logDir, "certs")
	if err := selfSigned(certs); err != nil {
		return 0, err
	}
	// Cluster API's core manager and its kubeadm bootstrap provider (which writes each worker's
	// join data, with a bootstrap token made in the customer's cluster). No webhook configuration
	// points at their webhooks (the objects the cluster-controller writes are complete); their
	// servers still need a certificate to start.
	for _, manager := range []string{"cluster-api-manager", "kubeadm-bootstrap-manager"} {
		ports, err := freePorts(2)
		if err != nil {
			return 0, err
		}
		if err := env.StartProcess(manager, logDir, nil,
			"--webhook-port="+strconv.Itoa(ports[0]), "--webhook-cert-dir="+certs,
			"--health-addr=127.0.0.1:"+strconv.Itoa(ports[1]), "--diagnostics-address=0", "--insecure-diagnostics=true"); err != nil {
			return 0, err
		}
	}

	// The real Flux source-controller and helm-controller (locked down as the platform runs them),
	// and the add-on charts served as the platform's add-on repository.
	if err := env.StartFlux(ctx, logDir); err != nil {
		return 0, err
	}
	repoDir := filepath.Join(logDir, "addons")
	if err := os.MkdirAll(repoDir, 0o700); err != nil {
		return 0, err
	}
	// The platform's base add-ons, and the test chart standing in for an ingress add-on.
	charts, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "deploy", "addons", "*"))
	if err != nil || len(charts) == 0 {
		return 0, fmt.Errorf("no add-on charts in deploy/addons: %v", err)
	}
	repo, err := testenv.ServeCharts(repoDir, 0, append(charts, filepath.Join("..", "..", "test", "addons", "ingress"))...)
	if err != nil {
		return 0, err
	}
	defer func() { _ = repo.Close() }()
	options := cluster.DefaultOptions()
	options.AddonsRepository = repo.URL
	options.InfraNamespace = infraNamespace
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: infraNamespace}}); err != nil {
		return 0, err
	}

	// The controller's writes to the objects it applies (not to status) are recorded at its transport.
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet && !strings.HasSuffix(req.URL.Path, "/status") && !strings.Contains(req.URL.Path, "/kubernetesclusters/") {
				applies.Add(1)
			}
			return rt.RoundTrip(req)
		})
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: kubernetescluster.ClientCacheOptions()},
		Cache:   cache.Options{ByObject: kubernetescluster.CacheByObject(infraNamespace)},
	})
	if err != nil {
		return 0, err
	}
	r := &kubernetescluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: options, Retry: time.Second}
	if err := r.SetupWithManagerAs(mgr, reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		defer reconciles.Add(1)
		return r.Reconcile(ctx, req)
	})); err != nil {
		return 0, err
	}
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "logs in", logDir)
		for _, manager := range []string{"cluster-api-manager", "kubeadm-bootstrap-manager", "helm-controller"} {
			if log, err := os.ReadFile(filepath.Join(logDir, manager+".log")); err == nil {
				fmt.Fprintf(os.Stderr, "--- %s log (last 8 KiB):\n%s\n", manager, tail(log, 8192))
			}
		}
	}
	cancel()
	return code, <-errc
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// selfSigned writes tls.crt and tls.key for 127.0.0.1 into dir.
func selfSigned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "capi-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// smallCluster is a KubernetesCluster of one control-plane replica and a node group "default" of
// min to max small nodes.
func smallCluster(ns, name string, min, max int32) *clusterapi.KubernetesCluster {
	return &clusterapi.KubernetesCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: clusterapi.KubernetesClusterSpec{Version: "1.37", ControlPlane: clusterapi.ControlPlane{Replicas: 1},
			NodeGroups: []clusterapi.NodeGroup{{Name: "default", MinReplicas: min, MaxReplicas: max, InstanceType: "small"}}}}
}
