package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BinDir returns the directory holding kube-apiserver, etcd, kubectl and friends:
// $KUBEBUILDER_ASSETS, else the builder's cache ($FLOTILLA_CACHE/bin, default ~/.cache/flotilla/bin).
func BinDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache := os.Getenv("FLOTILLA_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "flotilla")
		}
		dir = filepath.Join(cache, "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make test` (or libs/builder/build.sh) to build the control plane", b, dir)
		}
	}
	return dir, nil
}

// Options shape the control plane.
type Options struct {
	// CRDDirs are directories of CRD manifests to install before Start returns.
	CRDDirs []string
	// Webhooks are installed with a generated serving certificate pointing at a local port
	// (Env.WebhookOptions tells the webhook server where).
	Webhooks []*admissionv1.ValidatingWebhookConfiguration
	// MutatingWebhooks are installed the same way.
	MutatingWebhooks []*admissionv1.MutatingWebhookConfiguration
	// ControllerManager also runs kube-controller-manager's namespace, garbage-collector,
	// role-aggregation and PVC-protection controllers, so deletions really finish, and its
	// resourcequota controller, without which quota admission refuses every pod in a namespace
	// with a ResourceQuota ("status unknown for quota") instead of enforcing it.
	ControllerManager bool
	// DataDir keeps etcd's data (and the kubeconfig) across runs; empty means a temporary dir.
	DataDir string
	// WebhookPort fixes the port webhooks are expected on (127.0.0.1); 0 picks a free one.
	WebhookPort int
	// Scheme for the admin client; defaults to client-go's scheme.
	Scheme *runtime.Scheme
	// Aggregation configures kube-apiserver's front proxy, for aggregated API servers
	// (see RegisterAPIService).
	Aggregation bool
	// Node makes the control plane reachable from a real node (package node) on a NodeNetwork
	// of its own (configureNodeReach), and kube-controller-manager run every controller a node's
	// pods need (Deployments, Services' endpoints, ServiceAccounts, …). Needs root.
	Node bool
	// NodeIndex asks for that NodeNetwork index (the demo's is fixed); 0 takes the lowest free.
	NodeIndex int
	// AuditLog, if set, is where kube-apiserver logs every write (AuditEvents reads it): who
	// wrote what, to prove a component quiet.
	AuditLog string
}

// Env is a running control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
	// NodeNet is the network a real node joins, when Options.Node.
	NodeNet *NodeNetwork
	// FluxStoragePort is the loopback port StartFlux's source-controller serves its artifacts on;
	// 0 takes a free one. Artifacts' URLs name it, so a control plane started again on the same
	// state (the demo's) keeps it.
	FluxStoragePort int
	tmp             string
	procs           []*Process
}

// Start starts etcd and kube-apiserver (and kube-controller-manager when asked), installs CRDs and
// webhooks, and returns an admin client.
func Start(o Options) (*Env, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     o.CRDDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                o.Scheme,
		WebhookInstallOptions: envtest.WebhookInstallOptions{ValidatingWebhooks: o.Webhooks, MutatingWebhooks: o.MutatingWebhooks},
	}
	if o.WebhookPort != 0 {
		env.WebhookInstallOptions.LocalServingHost = "127.0.0.1"
		env.WebhookInstallOptions.LocalServingPort = o.WebhookPort
	}
	if o.DataDir != "" {
		env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(o.DataDir, "etcd")}
		if err := os.MkdirAll(env.ControlPlane.Etcd.DataDir, 0o700); err != nil {
			return nil, err
		}
	}
	var tmp string
	if o.Aggregation {
		dir := filepath.Join(o.DataDir, "front-proxy")
		if o.DataDir == "" {
			if tmp, err = os.MkdirTemp("", "flotilla-front-proxy-"); err != nil {
				return nil, err
			}
			dir = tmp
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := configureAggregation(env, dir); err != nil {
			return nil, err
		}
	}
	if o.AuditLog != "" {
		if err := configureAudit(env, o.AuditLog); err != nil {
			return nil, err
		}
	}
	var nodeNet *NodeNetwork
	if o.Node {
		if nodeNet, err = allocateNodeNetwork(o.NodeIndex); err != nil {
			return nil, err
		}
		dir := filepath.Join(o.DataDir, "pki")
		if o.DataDir == "" {
			if dir, err = os.MkdirTemp(tmp, "flotilla-pki-"); err != nil {
				return nil, err
			}
			if tmp == "" {
				tmp = dir
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := configureNodeReach(env, nodeNet, dir); err != nil {
			return nil, err
		}
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("starting control plane: %w", err), env.Stop())
	}
	e := &Env{Environment: env, Config: cfg, NodeNet: nodeNet, tmp: tmp}
	if e.Client, err = client.New(cfg, client.Options{Scheme: o.Scheme}); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	if o.ControllerManager {
		if err := e.StartControllerManager(o.DataDir); err != nil {
			return nil, errors.Join(err, e.Stop())
		}
	}
	return e, nil
}

// StartControllerManager starts kube-controller-manager with the controllers
// Options.ControllerManager names, for an Env started without it (localcp starts it once built).
// dataDir is Options.DataDir.
func (e *Env) StartControllerManager(dataDir string) error {
	dir := dataDir
	if dir == "" {
		dir = e.ControlPlane.APIServer.CertDir
	}
	controllers := []string{"--controllers=namespace-controller,garbage-collector-controller,clusterrole-aggregation-controller,persistentvolumeclaim-protection-controller,resourcequota-controller"}
	if e.NodeNet != nil {
		// Everything a node's pods need, as on a real cluster: the ServiceAccount and token
		// controllers, kube-root-ca.crt in every namespace, workloads, Services' endpoints, node
		// lifecycle (a starting node's not-ready taint). A Node that no kubelet ever reported for
		// (those tests and the demo make by hand) is never marked unreachable.
		certs := e.ControlPlane.APIServer.CertDir
		controllers = []string{"--controllers=*", "--node-startup-grace-period=87600h", "--root-ca-file=" + NodeCAFile(certs),
			"--service-account-private-key-file=" + filepath.Join(certs, "sa-signer.key")}
	}
	// kube-controller-manager ignores $KUBECONFIG: it is given the file StartProcess writes.
	return e.StartProcess("kube-controller-manager", dir, nil, append(controllers,
		"--kubeconfig="+kubeconfigPath(dir, "kube-controller-manager"),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--namespace-sync-period=10s",
		"--concurrent-namespace-syncs=5",
	)...)
}

// Stop stops everything Start started.
func (e *Env) Stop() error {
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].Stop()
	}
	err := e.Environment.Stop()
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
	if e.NodeNet != nil {
		_ = e.NodeNet.lock.Close()
	}
	return err
}

// As returns a client that impersonates user in groups, for RBAC checks.
func (e *Env) As(user string, groups ...string) (client.Client, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return client.New(cfg, client.Options{Scheme: e.Client.Scheme()})
}
