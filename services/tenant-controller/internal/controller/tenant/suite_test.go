package tenant_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/controller/tenant"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
	tenantwebhook "github.com/flotilla-dev/flotilla/services/tenant-controller/internal/webhook"
)

// The suite runs the real reconciler and webhook against a real kube-apiserver, etcd and
// kube-controller-manager (namespace deletion, role aggregation), with the chart's CRDs, webhook
// rules and tenant roles.
var (
	env        *testenv.Env
	k8s        client.Client
	stopMgr    context.CancelFunc
	managerErr chan error
	chartDir   = filepath.Join("..", "..", "..", "..", "..", "deploy", "charts", "tenant-controller")
)

func TestMain(m *testing.M) { testenv.Main(m, run) }

func run(m *testing.M) (int, error) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = tenancyv1.AddToScheme(scheme)
	manifests := filepath.Join(chartDir, "files", "manifests.yaml")
	hooks, err := testenv.ReadWebhooks(manifests)
	if err != nil {
		return 0, err
	}
	mutating, err := testenv.ReadMutatingWebhooks(manifests)
	if err != nil {
		return 0, err
	}
	// Flux's HelmRelease: the store of apps, whose deletion protection holds namespaces.
	flux, err := testenv.ModuleCRDDirs(testenv.FluxModules...)
	if err != nil {
		return 0, err
	}
	env, err = testenv.Start(testenv.Options{
		CRDDirs:           append(flux, filepath.Join(chartDir, "crds")),
		Webhooks:          hooks,
		MutatingWebhooks:  mutating,
		ControllerManager: true,
		Scheme:            scheme,
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client
	ctx := context.Background()
	for _, f := range []string{"tenant-roles.yaml", "finalizer-policy.yaml", "claims-policy.yaml", "app-identity-policy.yaml"} {
		if err := testenv.ApplyFile(ctx, k8s, filepath.Join(chartDir, "templates", f)); err != nil {
			return 0, err
		}
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootNamespace}}); err != nil {
		return 0, err
	}
	if err := startManager(); err != nil {
		return 0, err
	}
	defer stopManager()
	if err := waitForTenantAdmission(ctx); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// chartValues is what the suite's controller takes from the chart's default values, as its
// deployment passes them: objectCounts and namespaceGrants.
type chartValues struct {
	ObjectCounts    corev1.ResourceList `json:"objectCounts"`
	NamespaceGrants []struct {
		ClusterRole    string               `json:"clusterRole"`
		ServiceAccount types.NamespacedName `json:"serviceAccount"`
	} `json:"namespaceGrants"`
}

func readChartValues() (chartValues, error) {
	var values chartValues
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return values, err
	}
	return values, yaml.Unmarshal(raw, &values)
}

// chartObjectCounts is the chart's default objectCounts.
func chartObjectCounts() (corev1.ResourceList, error) {
	values, err := readChartValues()
	return values.ObjectCounts, err
}

// chartNamespaceGrants is the chart's default namespaceGrants.
func chartNamespaceGrants() ([]tenancy.NamespaceGrant, error) {
	values, err := readChartValues()
	var out []tenancy.NamespaceGrant
	for _, g := range values.NamespaceGrants {
		out = append(out, tenancy.NamespaceGrant{ClusterRole: g.ClusterRole, ServiceAccount: g.ServiceAccount})
	}
	return out, err
}

// startManager runs the tenant reconciler and webhook as the real binary would.
func startManager() error {
	o := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Client.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir,
		}),
		Cache: tenant.CacheOptions(),
		// The suite restarts the manager; the controller's metrics name is reused on purpose.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	lists.Client = mgr.GetClient()
	counts, err := chartObjectCounts()
	if err != nil {
		return err
	}
	grants, err := chartNamespaceGrants()
	if err != nil {
		return err
	}
	r := &tenant.Reconciler{Client: lists, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("tenant-controller"),
		ObjectCounts: counts, NamespaceGrants: grants}
	ctx, cancel := context.WithCancel(context.Background())
	stopMgr = cancel
	if err := r.SetupWithManager(ctx, mgr, 4); err != nil {
		return err
	}
	if err := (&tenantwebhook.TenantValidator{Reader: mgr.GetClient(), Reviewer: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	managerErr = make(chan error, 1)
	go func() { managerErr <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	// Wait until the webhook answers so that the first test does not race it.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	return wait.PollUntilContextCancel(wctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return mgr.GetWebhookServer().StartedChecker()(nil) == nil, nil
	})
}

// lists is the reconciler's client, whose List of the Tenants in one namespace fails while a test
// says so (failLists): a List error in the tenant tree's load.
var lists = &faultyLists{}

type faultyLists struct {
	client.Client
	namespace atomic.Pointer[string]
	failed    atomic.Int64
}

// failLists makes the List of the Tenants in namespace ns fail until the test ends.
func failLists(t *testing.T, ns string) {
	lists.namespace.Store(&ns)
	t.Cleanup(func() { lists.namespace.Store(nil) })
}

func (f *faultyLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if ns := f.namespace.Load(); ns != nil {
		if _, tenants := list.(*tenancyv1.TenantList); tenants && (&client.ListOptions{}).ApplyOptions(opts).Namespace == *ns {
			f.failed.Add(1)
			return fmt.Errorf("listing the tenants in %s: injected failure", *ns)
		}
	}
	return f.Client.List(ctx, list, opts...)
}

func stopManager() {
	stopMgr()
	<-managerErr
}

// waitForTenantAdmission waits until kube-apiserver admits Tenants: its mutating admission
// policies know a custom resource's type only once the CRD's schema is published, a few seconds
// after the CRD is installed ("Resource kind ... not found" until then).
func waitForTenantAdmission(ctx context.Context) error {
	probe := &tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: tenancyv1.RootNamespace}}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(wctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return last == nil || apierrors.IsAlreadyExists(last), nil
	})
	if err != nil {
		return fmt.Errorf("tenants are not admitted: %w (last: %v)", err, last)
	}
	return nil
}
