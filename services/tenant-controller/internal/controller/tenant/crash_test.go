package tenant_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// The real binary, killed with SIGKILL while it builds a subtree and again while it tears the
// subtree down, and started again each time, leaves no tenant half-built or wedged: every tenant
// ends Ready with all its objects, then everything is deleted.
func TestSIGKILLWhileCreatingAndDeletingASubtree(t *testing.T) {
	g := NewWithT(t)
	bin, kubeconfig := buildController(t), controllerKubeconfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	rootTenant(t)
	parent := MakeTenant("crash", "tenant-root").Quota("cpu", "10").Quota("count/pods", "100").Obj()
	var kids, grandkids []*tenancyv1.Tenant
	for i := range 4 {
		kid := MakeTenant(fmt.Sprintf("c%d", i), "tenant-crash").Quota("cpu", "2").Quota("count/pods", "20").Obj()
		kids = append(kids, kid)
		grandkids = append(grandkids, MakeTenant("g", "tenant-crash-"+kid.Name).Quota("cpu", "1").Quota("count/pods", "5").Obj())
	}
	all := append(append([]*tenancyv1.Tenant{parent}, kids...), grandkids...)
	// Cleanups run last first: stop the binary, bring the suite's controller back, remove leftovers.
	t.Cleanup(func() { deleteTree(ctxFor(t), NewWithT(t), parent) })
	t.Cleanup(func() { g.Expect(startManager()).To(Succeed()) })
	stopManager()
	c := startController(t, bin, kubeconfig)
	t.Cleanup(func() { c.kill() })

	// Creating: the kids are created together; the controller dies as soon as the first of their
	// namespaces appears, while the others are still being built.
	createAll(ctx, g, parent)
	g.Eventually(func() error {
		return k8s.Get(ctx, types.NamespacedName{Name: ownNamespace(parent)}, &corev1.Namespace{})
	}).WithTimeout(30 * time.Second).Should(Succeed())
	var wg sync.WaitGroup
	errs := make([]error, len(kids))
	for i, kid := range kids {
		wg.Go(func() { errs[i] = k8s.Create(ctx, kid) })
	}
	wg.Wait()
	g.Expect(errors.Join(errs...)).To(Succeed())
	g.Eventually(func() bool { return anyNamespace(ctx, kids) }).WithTimeout(30 * time.Second).Should(BeTrue())
	c.kill()
	t.Logf("killed while creating: %d of %d kids Ready", countReady(ctx, kids), len(kids))
	c = startController(t, bin, kubeconfig)
	createAll(ctx, g, grandkids...)
	eventuallyCurrent(ctx, g, all...)

	// Deleting: the controller dies once the teardown has removed its first namespace.
	g.Expect(k8s.Delete(ctx, parent)).To(Succeed())
	g.Eventually(func() bool {
		for _, gk := range grandkids {
			err := k8s.Get(ctx, types.NamespacedName{Name: ownNamespace(gk)}, &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				return true
			}
		}
		return false
	}).WithTimeout(60 * time.Second).Should(BeTrue())
	c.kill()
	c = startController(t, bin, kubeconfig)
	deleteTree(ctx, g, all...)
	for _, tn := range all {
		ns := ownNamespace(tn)
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: ns}, &corev1.Namespace{}))
		}).WithTimeout(60*time.Second).Should(BeTrue(), "namespace %s", ns)
	}
}

func anyNamespace(ctx context.Context, ts []*tenancyv1.Tenant) bool {
	for _, tn := range ts {
		if k8s.Get(ctx, types.NamespacedName{Name: ownNamespace(tn)}, &corev1.Namespace{}) == nil {
			return true
		}
	}
	return false
}

func countReady(ctx context.Context, ts []*tenancyv1.Tenant) int {
	n := 0
	for _, tn := range ts {
		got := &tenancyv1.Tenant{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(tn), got) == nil && condition(got, "Ready").Status == "True" {
			n++
		}
	}
	return n
}

// buildController builds the tenant-controller binary.
func buildController(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "tenant-controller")
	if err := testenv.BuildProgram(context.Background(), ".", "../../../cmd", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// controllerProcess is the binary running as its own process, serving the suite's webhooks.
type controllerProcess struct{ cmd *exec.Cmd }

func ownNamespace(tn *tenancyv1.Tenant) string {
	return tenancy.OwnNamespace(client.ObjectKeyFromObject(tn))
}

// controllerKubeconfig writes a kubeconfig for the controller process.
func controllerKubeconfig(t *testing.T) string {
	user, err := env.AddUser(envtest.User{Name: "tenant-controller", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startController(t *testing.T, bin, kubeconfig string) *controllerProcess {
	o := env.WebhookInstallOptions
	cmd := exec.Command(bin, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		fmt.Sprintf("--webhook-port=%d", o.LocalServingPort), "--webhook-cert-dir="+o.LocalServingCertDir,
		"--concurrency=4", "--zap-log-level=error")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(o.LocalServingHost, fmt.Sprint(o.LocalServingPort))
	for i := 0; ; i++ {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		if i > 300 {
			t.Fatal("the controller's webhook never came up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &controllerProcess{cmd: cmd}
}

// kill sends SIGKILL: no cleanup, no lease release, as a node failure or the OOM killer would.
func (c *controllerProcess) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}
