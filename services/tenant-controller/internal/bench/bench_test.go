package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// tenants is the tree's size; BENCH_TENANTS overrides it for a quick look.
var tenants = envInt("BENCH_TENANTS", 1000)

const (
	fanout      = 6
	workers     = 8 // the controller's default --concurrency, and the floor's parallelism
	quietPeriod = 60 * time.Second
)

var chart = filepath.Join("..", "..", "..", "..", "deploy", "charts", "tenant-controller")

// BenchmarkTenantTree reports, in one run on one control plane:
//   - floor-s: seconds to create the namespaces, role bindings, quotas, network policies and delivery objects of the
//     tree directly with client-go, `workers` at a time;
//   - controller-s: seconds from the first Tenant created to all 1,000 Ready;
//   - ratio: controller-s / floor-s;
//   - quiet-writes: API writes the controller makes in the 60 s after convergence;
//   - peak-rss-MiB: the controller process's peak resident memory.
func BenchmarkTenantTree(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	b.StopTimer()
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = tenancyv1.AddToScheme(scheme)
	hooks, err := testenv.ReadWebhooks(filepath.Join(chart, "files", "manifests.yaml"))
	check(b, err)
	port := freePort(b)
	env, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join(chart, "crds")}, Webhooks: hooks,
		WebhookPort: port, Scheme: scheme})
	check(b, err)
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client
	check(b, testenv.ApplyFile(ctx, c, filepath.Join(chart, "templates", "tenant-roles.yaml")))
	tree := makeTree()
	var r result

	apiserver := pidOf(b, "kube-apiserver")
	progress("floor: creating the objects of %d tenants directly", len(tree))
	cpu0 := cpuSeconds(b, apiserver)
	r.floor = measureFloor(ctx, b, c, tree)
	r.apiserverFloorCPU = cpuSeconds(b, apiserver) - cpu0
	progress("floor: %s (kube-apiserver CPU %.1fs)", r.floor, r.apiserverFloorCPU)

	proc, metricsAddr := startController(b, env, port)
	defer func() { _ = proc.Process.Kill(); _ = proc.Wait() }()
	progress("controller: creating %d tenants", len(tree))
	cpu0 = cpuSeconds(b, apiserver)
	if out := os.Getenv("BENCH_APISERVER_PROFILE"); out != "" {
		go profileAPIServer(b, env, out)
	}
	b.StartTimer()
	r.controller = measureController(ctx, b, env.Config, c, tree)
	b.StopTimer()
	r.apiserverControllerCPU = cpuSeconds(b, apiserver) - cpu0
	r.controllerCPU = cpuSeconds(b, proc.Process.Pid)
	r.reconciles = metric(b, metricsAddr, "controller_runtime_reconcile_total", "")
	r.writes = writes(b, metricsAddr)
	progress("controller: all Ready in %s (kube-apiserver CPU %.1fs, controller CPU %.1fs, %d reconciles, %d API writes); counting writes for %s",
		r.controller, r.apiserverControllerCPU, r.controllerCPU, r.reconciles, r.writes, quietPeriod)

	time.Sleep(quietPeriod)
	r.quietWrites = writes(b, metricsAddr) - r.writes
	r.peakRSSKiB = peakRSS(b, proc.Process.Pid)

	b.ReportMetric(r.floor.Seconds(), "floor-s")
	b.ReportMetric(r.controller.Seconds(), "controller-s")
	b.ReportMetric(r.ratio(), "ratio")
	b.ReportMetric(float64(r.quietWrites), "quiet-writes")
	b.ReportMetric(float64(r.peakRSSKiB)/1024, "peak-rss-MiB")
	writeResult(b, r)
}

// result holds one run's figures.
type result struct {
	floor, controller                                        time.Duration
	apiserverFloorCPU, apiserverControllerCPU, controllerCPU float64
	reconciles, writes, quietWrites, peakRSSKiB              int
}

func (r result) ratio() float64 { return r.controller.Seconds() / r.floor.Seconds() }

// node is one tenant of the benchmark tree.
type node struct {
	t     *tenancyv1.Tenant
	place tenancy.Placement
	chain []*tenancyv1.Tenant
}

// makeTree builds root + 6 + 36 + 216 + 741 tenants (depth 4), each reserving a tenth of its
// parent's pod quota.
func makeTree() []node {
	root := &tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: tenancyv1.RootNamespace}}
	root.Spec.Host, root.Spec.Ingress, root.Spec.Monitoring, root.Spec.Etcd = "example.org", true, true, true
	root.Spec.ResourceQuotas = corev1.ResourceList{"count/pods": resource.MustParse("1000000")}
	nodes := []node{{t: root, chain: []*tenancyv1.Tenant{root}, place: place(root)}}
	for i := 0; len(nodes) < tenants; i++ {
		parent := nodes[i]
		for j := 0; j < fanout && len(nodes) < tenants; j++ {
			q := parent.t.Spec.ResourceQuotas["count/pods"]
			t := &tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t%d", len(nodes)), Namespace: parent.place.Namespace}}
			t.Spec.ResourceQuotas = corev1.ResourceList{"count/pods": *resource.NewQuantity(q.Value()/10, resource.DecimalSI)}
			nodes = append(nodes, node{t: t, place: place(t), chain: append(append([]*tenancyv1.Tenant{}, parent.chain...), t)})
		}
	}
	return nodes
}

func place(t *tenancyv1.Tenant) tenancy.Placement {
	p, err := tenancy.Place(types.NamespacedName{Namespace: t.Namespace, Name: t.Name})
	if err != nil {
		panic(err)
	}
	return p
}

// measureFloor creates what the controller would, for every tenant, as plain creates with a
// "floor-" prefix on the namespaces.
func measureFloor(ctx context.Context, b *testing.B, c client.Client, tree []node) time.Duration {
	start := time.Now()
	parallel(b, tree, func(n node) error {
		p := n.place
		p.Namespace = "floor-" + p.Namespace
		var children []tenancyv1.Tenant
		objs := []client.Object{}
		ns := &corev1.Namespace{}
		convert(tenancy.Namespace(p, n.t, tenancy.Resolve(n.chain), "uid"), ns)
		objs = append(objs, ns)
		for _, rb := range tenancy.RoleBindings(p.Namespace, n.chain, "") {
			o := &rbacv1.RoleBinding{}
			convert(rb, o)
			objs = append(objs, o)
		}
		rq := &corev1.ResourceQuota{}
		convert(tenancy.ResourceQuota(p.Namespace, tenancy.OwnQuota(n.t, children)), rq)
		objs = append(objs, rq)
		for _, np := range tenancy.NetworkPolicies(p, n.t) {
			o := &networkingv1.NetworkPolicy{}
			convert(np, o)
			objs = append(objs, o)
		}
		// The delivery namespace, its ServiceAccount and the delivery identity's two bindings.
		dns := &corev1.Namespace{}
		convert(tenancy.DeliveryNamespace(n.place, "uid"), dns)
		dns.Name = "floor-" + dns.Name
		sa := &corev1.ServiceAccount{}
		convert(tenancy.DeliveryServiceAccount(dns.Name), sa)
		inTenant, inDelivery := &rbacv1.RoleBinding{}, &rbacv1.RoleBinding{}
		convert(tenancy.DeliveryRoleBinding(p.Namespace, n.place.Namespace, tenancyv1.DeliveryClusterRole), inTenant)
		convert(tenancy.DeliveryRoleBinding(dns.Name, n.place.Namespace, tenancyv1.DeliveryStorageClusterRole), inDelivery)
		objs = append(objs, dns, sa, inTenant, inDelivery)
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})
	return time.Since(start)
}

// measureController creates the Tenants, each once its parent tenant and the namespace it lives
// in exist (watched through an informer cache, as a GitOps tool would), and waits for all of them
// to be Ready for their generation.
func measureController(ctx context.Context, b *testing.B, cfg *rest.Config, c client.Client, tree []node) time.Duration {
	seen, err := cache.New(cfg, cache.Options{Scheme: c.Scheme()})
	check(b, err)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, o := range []client.Object{&corev1.Namespace{}, &tenancyv1.Tenant{}} {
		_, err := seen.GetInformer(cctx, o)
		check(b, err)
	}
	go func() { _ = seen.Start(cctx) }()
	seen.WaitForCacheSync(cctx)

	start := time.Now()
	check(b, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootNamespace}}))
	parallel(b, tree, func(n node) error {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			parentReady := true
			if n.place.Parent.Name != "" {
				parentReady = seen.Get(ctx, n.place.Parent, &tenancyv1.Tenant{}) == nil &&
					seen.Get(ctx, types.NamespacedName{Name: n.t.Namespace}, &corev1.Namespace{}) == nil
			}
			if parentReady {
				err := c.Create(ctx, n.t.DeepCopy())
				if err == nil {
					return nil
				}
				if !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
					return fmt.Errorf("creating tenant %s/%s: %w", n.t.Namespace, n.t.Name, err)
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("tenant %s/%s: parent never appeared", n.t.Namespace, n.t.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	for {
		list := &tenancyv1.TenantList{}
		check(b, seen.List(ctx, list))
		ready := 0
		for i := range list.Items {
			t := &list.Items[i]
			for _, cond := range t.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue && t.Status.ObservedGeneration == t.Generation {
					ready++
				}
			}
		}
		if ready == tenants {
			return time.Since(start)
		}
		if time.Since(start) > 15*time.Minute {
			b.Fatalf("only %d of %d tenants Ready after 15 minutes", ready, tenants)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parallel runs fn over the tree in order, `workers` at a time (order matters only in that a
// worker starts tenants in tree order).
func parallel(b *testing.B, tree []node, fn func(node) error) {
	work := make(chan node)
	errs := make(chan error, len(tree))
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if err := fn(n); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, n := range tree {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// startController runs the real tenant-controller binary as its own process, as in production.
func startController(b *testing.B, env *testenv.Env, webhookPort int) (*exec.Cmd, string) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "tenant-controller")
	build := exec.Command("go", "build", "-o", bin, "../../cmd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	check(b, build.Run())
	user, err := env.AddUser(envtest.User{Name: "tenant-controller", Groups: []string{"system:masters"}}, nil)
	check(b, err)
	kubeconfig, err := user.KubeConfig()
	check(b, err)
	check(b, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	cmd := exec.Command(bin, "--metrics-bind-address="+metrics, "--health-probe-bind-address=127.0.0.1:0",
		fmt.Sprintf("--webhook-port=%d", webhookPort), "--webhook-cert-dir="+env.WebhookInstallOptions.LocalServingCertDir,
		fmt.Sprintf("--concurrency=%d", workers), "--zap-log-level=error")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "kubeconfig"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	check(b, cmd.Start())
	// Ready once its webhook answers.
	for i := 0; ; i++ {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", webhookPort))
		if err == nil {
			conn.Close()
			break
		}
		if i > 300 {
			b.Fatal("controller webhook never came up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cmd, metrics
}

// writes sums the controller's non-GET API requests from its client-go metrics.
func writes(b *testing.B, addr string) int {
	return metric(b, addr, "rest_client_requests_total", `method="GET"`)
}

// metric sums the samples of a counter from a Prometheus endpoint, leaving out those whose labels
// contain exclude.
func metric(b *testing.B, addr, name, exclude string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	check(b, err)
	defer resp.Body.Close()
	total := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || (exclude != "" && strings.Contains(line, exclude)) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		check(b, err)
		total += int(v)
	}
	return total
}

// profileAPIServer saves a 20-second CPU profile of kube-apiserver (BENCH_APISERVER_PROFILE), to
// see where the controller phase spends the server's time: go tool pprof -top FILE.
func profileAPIServer(b *testing.B, env *testenv.Env, out string) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		progress("profile: %v", err)
		return
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "20").DoRaw(context.Background())
	if err != nil {
		progress("profile: %v", err)
		return
	}
	_ = os.WriteFile(out, raw, 0o644)
}

// pidOf finds the process whose executable is named name (the control plane this run started).
func pidOf(b *testing.B, name string) int {
	entries, err := os.ReadDir("/proc")
	check(b, err)
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || !strings.Contains(string(stat), "("+name+")") {
			continue
		}
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if strings.Contains(string(status), fmt.Sprintf("PPid:\t%d\n", self)) {
			return pid
		}
	}
	b.Fatalf("no %s started by this process", name)
	return 0
}

// cpuSeconds reads the user+system CPU time of a process.
func cpuSeconds(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(b, err)
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return float64(utime+stime) / 100 // USER_HZ
}

// peakRSS reads VmHWM (KiB) of a process.
func peakRSS(b *testing.B, pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	check(b, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kib, err := strconv.Atoi(f[1])
			check(b, err)
			return kib
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// writeResult writes the figures into their section of docs/benchmarks.md, when BENCH_OUT names it.
func writeResult(b *testing.B, r result) {
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		return
	}
	status := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	body := fmt.Sprintf(`## tenant-controller: a %d-tenant tree (depth 4) to all Ready

| figure | value | goal |
|---|---|---|
| floor: the same namespaces, role bindings, quotas, network policies and delivery namespaces with their ServiceAccount and bindings, created directly with client-go (%d in parallel) | %.1f s | |
| tenant-controller: first Tenant created → all %d Ready (a client creating each tenant once its parent exists) | %.1f s | |
| ratio controller / floor | **%.2f×** | ≤ 1.5× (%s) |
| API writes by the controller in the %d s after convergence | **%d** | 0 (%s) |
| controller peak RSS (VmHWM) | %.0f MiB | |
| kube-apiserver CPU: floor / controller phase | %.1f s / %.1f s | |
| controller CPU, reconciles, API writes until converged | %.1f s, %d, %d | |

The controller runs as its own process (the real binary, %d workers) with its admission webhook
in the path of every Tenant create; the floor makes plain creates with no controller, webhook, Tenant
objects or status. See `+"`services/tenant-controller/internal/bench`"+`.
`, tenants, workers, r.floor.Seconds(), tenants, r.controller.Seconds(), r.ratio(), status(r.ratio() <= 1.5),
		int(quietPeriod.Seconds()), r.quietWrites, status(r.quietWrites == 0), float64(r.peakRSSKiB)/1024,
		r.apiserverFloorCPU, r.apiserverControllerCPU, r.controllerCPU, r.reconciles, r.writes, workers)
	check(b, testenv.WriteBenchSection(out, "tenant-controller", body))
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, ">> "+format+"\n", args...)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func convert(from, to any) {
	raw, err := json.Marshal(from)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(raw, to); err != nil {
		panic(err)
	}
}

func freePort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(b, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
