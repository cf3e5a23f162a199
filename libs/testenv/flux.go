package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/module"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FluxModules are the Flux controllers the builder builds (libs/builder/flux).
var FluxModules = []string{"github.com/fluxcd/source-controller@v1.9.6", "github.com/fluxcd/helm-controller@v1.6.4"}

// ModuleCRDDirs returns config/crd/bases of each module@version (ModuleDir): the real CRDs of Flux,
// CloudNativePG, Cluster API, ….
func ModuleCRDDirs(modules ...string) ([]string, error) {
	var dirs []string
	for _, m := range modules {
		dir, err := ModuleDir(m)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.Join(dir, "config", "crd", "bases"))
	}
	return dirs, nil
}

// ModuleDir returns where the Go module cache holds module@version, downloading it through the
// module proxy if missing. A module the cache holds already (verified when it came) is read there:
// `go mod download` would ask the checksum database again for a module the calling module's go.sum
// does not list.
func ModuleDir(m string) (string, error) {
	cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	if dir, ok := cachedModuleDir(strings.TrimSpace(string(cache)), m); ok {
		return dir, nil
	}
	out, err := exec.Command("go", "mod", "download", "-json", m).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", m, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	return info.Dir, nil
}

// cachedModuleDir is where the module cache holds module@version, if it does.
func cachedModuleDir(cache, m string) (string, bool) {
	path, version, _ := strings.Cut(m, "@")
	ep, err := module.EscapePath(path)
	if err != nil {
		return "", false
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", false
	}
	dir := filepath.Join(cache, ep+"@"+ev)
	fi, err := os.Stat(dir)
	return dir, err == nil && fi.IsDir()
}

// FluxNamespace is where the Flux controllers run (their events and leases).
const FluxNamespace = "flux-system"

// FluxLockdown are helm-controller's multi-tenancy lockdown flags, as a platform must run it: a
// HelmRelease may use only sources in its own namespace, and one that names no ServiceAccount is
// installed as FluxDefaultServiceAccount (which has no rights), never as helm-controller itself.
var FluxLockdown = []string{"--no-cross-namespace-refs=true", "--default-service-account=" + FluxDefaultServiceAccount}

// FluxDefaultServiceAccount is the ServiceAccount a HelmRelease without one is installed as; no
// role binds it.
const FluxDefaultServiceAccount = "flotilla-no-access"

// StartFlux runs the real source-controller and helm-controller (locked down: FluxLockdown) as
// local processes against the control plane, with their artifact storage under dir served on a loopback port. The Flux CRDs
// must be installed (Options.CRDDirs with ModuleCRDDirs(FluxModules...)). sourceEnv is added to
// source-controller's environment (SSL_CERT_FILE=<a registry's CA>, say).
func (e *Env) StartFlux(ctx context.Context, dir string, sourceEnv ...string) error {
	if err := client.IgnoreAlreadyExists(e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: FluxNamespace}})); err != nil {
		return err
	}
	storage := filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(storage, 0o700); err != nil {
		return err
	}
	port := e.FluxStoragePort
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return err
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	env := []string{"RUNTIME_NAMESPACE=" + FluxNamespace}
	common := []string{"--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", "--log-level=info", "--requeue-dependency=2s"}
	if err := e.StartProcess("source-controller", dir, append(slices.Clone(env), sourceEnv...), append(common,
		"--storage-path="+storage, "--storage-addr="+addr, "--storage-adv-addr="+addr)...); err != nil {
		return err
	}
	return e.StartProcess("helm-controller", dir, env, append(append(common, "--concurrent=8"), FluxLockdown...)...)
}

// KustomizeModule is the Flux kustomize-controller the builder builds (libs/builder/flux).
const KustomizeModule = "github.com/fluxcd/kustomize-controller@v1.9.6"

// StartKustomizeController runs the real kustomize-controller as a local process, for tests that
// install the way a platform team does: by Flux Kustomizations. StartFlux must have run, and the
// kustomize-controller CRDs be installed (ModuleCRDDirs(KustomizeModule)).
func (e *Env) StartKustomizeController(dir string) error {
	return e.StartProcess("kustomize-controller", dir, []string{"RUNTIME_NAMESPACE=" + FluxNamespace},
		"--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", "--log-level=info", "--requeue-dependency=2s",
		"--no-remote-bases=true")
}

// FreePort returns a loopback port nothing listens on (for a server a test starts).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
