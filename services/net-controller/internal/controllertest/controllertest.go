// Package controllertest holds what the net-controller's integration suites share: running the
// reconcilers in a manager against the suite's kube-apiserver, the CRD directories, tenant
// namespaces as the tenant-controller labels them, and a client that counts writes. Only tests
// import it.
package controllertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	kubeovnv1 "github.com/kubeovn/kube-ovn/pkg/apis/kubeovn/v1"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/runtime/conditions"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/services/net-controller/internal/controller/tenantsubnet"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// How long a test waits for the reconcilers, and how often it looks.
const (
	Timeout  = time.Minute
	Interval = 100 * time.Millisecond
)

// TestLabel keeps each test's namespaces to the test's own pool.
const TestLabel = "test.net.flotilla.dev/case"

// Main runs a suite: logs at error level (debug with -v), run sets up the real components and runs
// the tests, and its error fails the binary.
func Main(m *testing.M, run func(*testing.M) (int, error)) { testenv.Main(m, run) }

// moduleDir is services/net-controller: the nearest directory above the test's working directory
// (its package's) with a go.mod. Not the source file's path, which -trimpath leaves relative.
func moduleDir() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("controllertest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ChartCRDs is the directory of this service's CRDs in its chart.
func ChartCRDs() string {
	return filepath.Join(moduleDir(), "..", "..", "deploy", "charts", "net-controller", "crds")
}

// ChartDir is a file or directory of this service's chart.
func ChartDir(elem ...string) string {
	return filepath.Join(append([]string{moduleDir(), "..", "..", "deploy", "charts"}, elem...)...)
}

// MetalLBCRDs is the directory of MetalLB's published CRDs (test/crds/metallb/SOURCE.md).
func MetalLBCRDs() string { return filepath.Join(moduleDir(), "test", "crds", "metallb") }

// KubeOVNCRDs is the directory of Kube-OVN's CRDs in the module cache.
func KubeOVNCRDs() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/kubeovn/kube-ovn").Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/kubeovn/kube-ovn: %w", err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	return filepath.Join(info.Dir, "charts", "kube-ovn-v2", "crds"), nil
}

// StartManager runs reconcilers (setup registers them) as the binary does, with a cache of their
// own, and returns a function that stops them. A test may run a second one beside its suite's (two
// replicas racing).
func StartManager(cfg *rest.Config, scheme *kruntime.Scheme, setup func(ctrl.Manager) error) (func(), error) {
	opts := ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if scheme.Recognizes(kubeovnv1.SchemeGroupVersion.WithKind("Subnet")) {
		tenantsubnet.CacheOptions(&opts) // as the binary's cache, in the suites that have Subnets
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := setup(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("cache did not sync")
	}
	return func() { cancel(); <-done }, nil
}

// Ready waits until the object of type T named by key is Ready for its generation, and returns it.
func Ready[T any, P interface {
	*T
	client.Object
	conditions.Setter
}](ctx context.Context, g gomega.Gomega, c client.Client, key types.NamespacedName) P {
	var obj P = new(T)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, key, obj)).To(gomega.Succeed())
		g.Expect(conditions.IsReady(obj)).To(gomega.BeTrue(), "%T %s: %v", obj, key, obj.GetConditions())
	}).WithTimeout(Timeout).WithPolling(Interval).Should(gomega.Succeed())
	return obj
}

// Ctx is a test's context, cancelled when it ends.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Create creates objects, failing the test on the first error.
func Create(ctx context.Context, t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// TenantNamespace is a namespace as the tenant-controller labels it, in one test case.
func TenantNamespace(name, testCase string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		tenancyv1.LabelTenant: name, TestLabel: testCase}}}
}

// CaseSelector selects the namespaces of one test case.
func CaseSelector(testCase string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{TestLabel: testCase}}
}

// DropTenantLabel makes a namespace no longer a tenant's (as if its Tenant were gone).
func DropTenantLabel(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	before := ns.DeepCopy()
	delete(ns.Labels, tenancyv1.LabelTenant)
	if err := c.Patch(ctx, ns, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

// WriteCounter records the writing requests a client sends (even those kube-apiserver turns into
// no-ops, which leave the resourceVersion alone).
type WriteCounter struct {
	mu    sync.Mutex
	calls []string
}

// Calls are the writes recorded, as "verb type".
func (w *WriteCounter) Calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}

func (w *WriteCounter) add(verb string, obj any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, fmt.Sprintf("%s %T", verb, obj))
}

// Wrap returns c recording its writes in w.
func (w *WriteCounter) Wrap(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			w.add("create", o)
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			w.add("update", o)
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.add("patch", o)
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o kruntime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w.add("apply", o)
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			w.add("delete", o)
			return c.Delete(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.add("patch/"+sub, o)
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			w.add("update/"+sub, o)
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
	})
}
