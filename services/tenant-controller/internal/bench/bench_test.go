package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/tenant-controller/internal/tenancy"
)

// tenants is the tree's size; BENCH_TENANTS overrides it (a quick look, or the nightly-sized run
// of 10,000, which writes its own section of docs/benchmarks.md).
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
//   - least-ratio: (floor-s + the Tenant objects alone) / floor-s, which no controller of Tenants
//     can go below (measureTenantObjects);
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
	mutating, err := testenv.ReadMutatingWebhooks(filepath.Join(chart, "files", "manifests.yaml"))
	check(b, err)
	port := freePort(b)
	env, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join(chart, "crds")}, Webhooks: hooks,
		MutatingWebhooks: mutating, WebhookPort: port, Scheme: scheme})
	check(b, err)
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client
	check(b, testenv.ApplyFile(ctx, c, filepath.Join(chart, "templates", "tenant-roles.yaml")))
	check(b, testenv.ApplyFile(ctx, c, filepath.Join(chart, "templates", "finalizer-policy.yaml")))
	tree := makeTree()
	var r result

	cs, err := kubernetes.NewForConfig(env.Config)
	check(b, err)
	apiserver, etcd := pidOf(b, "kube-apiserver"), pidOf(b, "etcd")
	installTwin(ctx, b, c)
	progress("floor: creating the objects of %d tenants directly", len(tree))
	cpu0, etcd0 := cpuSeconds(b, apiserver), cpuSeconds(b, etcd)
	req0 := apiRequests(b, cs)
	r.floor = measureFloor(ctx, b, c, tree)
	r.apiserverFloorCPU, r.etcdFloorCPU = cpuSeconds(b, apiserver)-cpu0, cpuSeconds(b, etcd)-etcd0
	r.floorRequests = apiRequests(b, cs).minus(req0)
	progress("floor: %s (kube-apiserver CPU %.1fs)", r.floor, r.apiserverFloorCPU)

	proc, metricsAddr, pprofAddr := startController(b, env, port)
	defer func() { _ = proc.Process.Kill(); _ = proc.Wait() }()
	waitForTenantAdmission(ctx, b, c)
	progress("controller: creating %d tenants", len(tree))
	cpu0, etcd0 = cpuSeconds(b, apiserver), cpuSeconds(b, etcd)
	req0 = apiRequests(b, cs)
	if out := os.Getenv("BENCH_APISERVER_PROFILE"); out != "" {
		go profile(cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "20").DoRaw, out)
	}
	if out := os.Getenv("BENCH_CONTROLLER_PROFILE"); out != "" {
		go profile(func(context.Context) ([]byte, error) {
			return httpGet("http://" + pprofAddr + "/debug/pprof/profile?seconds=20")
		}, out)
	}
	b.StartTimer()
	r.controller, r.latencies = measureController(ctx, b, env.Config, c, tree)
	b.StopTimer()
	r.apiserverControllerCPU, r.etcdControllerCPU = cpuSeconds(b, apiserver)-cpu0, cpuSeconds(b, etcd)-etcd0
	r.controllerRequests = apiRequests(b, cs).minus(req0)
	r.controllerCPU = cpuSeconds(b, proc.Process.Pid)
	r.reconciles = metric(b, metricsAddr, "controller_runtime_reconcile_total", "")
	r.writes = writes(b, metricsAddr)
	progress("controller: all Ready in %s (kube-apiserver CPU %.1fs, controller CPU %.1fs, %d reconciles, %d API writes); counting writes for %s",
		r.controller, r.apiserverControllerCPU, r.controllerCPU, r.reconciles, r.writes, quietPeriod)

	time.Sleep(quietPeriod)
	r.quietWrites = writes(b, metricsAddr) - r.writes
	r.peakRSSKiB = peakRSS(b, proc.Process.Pid)
	if out := os.Getenv("BENCH_CONTROLLER_HEAP"); out != "" { // what the converged controller holds
		heap, err := httpGet("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
		check(b, err)
		check(b, os.WriteFile(out, heap, 0o644))
	}
	r.events = tenantEvents(ctx, b, c)

	progress("the Tenant objects alone: creating %d twins, their status and Events", len(tree))
	cpu0 = cpuSeconds(b, apiserver)
	r.tenantObjects = measureTenantObjects(ctx, b, c, tree)
	r.apiserverTenantObjectsCPU = cpuSeconds(b, apiserver) - cpu0
	progress("the Tenant objects alone: %s (kube-apiserver CPU %.1fs)", r.tenantObjects, r.apiserverTenantObjectsCPU)

	b.ReportMetric(r.floor.Seconds(), "floor-s")
	b.ReportMetric(r.controller.Seconds(), "controller-s")
	b.ReportMetric(r.ratio(), "ratio")
	b.ReportMetric(r.leastRatio(), "least-ratio")
	b.ReportMetric(float64(r.quietWrites), "quiet-writes")
	b.ReportMetric(float64(r.peakRSSKiB)/1024, "peak-rss-MiB")
	b.ReportMetric(r.latency(0.50).Seconds(), "p50-s")
	b.ReportMetric(r.latency(0.99).Seconds(), "p99-s")
	writeResult(b, r)
}

// result holds one run's figures.
type result struct {
	floor, controller                                        time.Duration
	apiserverFloorCPU, apiserverControllerCPU, controllerCPU float64
	etcdFloorCPU, etcdControllerCPU                          float64
	// tenantObjects: the Tenants alone (measureTenantObjects), a lower bound of any controller's cost
	// beyond the floor.
	tenantObjects                                       time.Duration
	apiserverTenantObjectsCPU                           float64
	reconciles, writes, quietWrites, peakRSSKiB, events int
	// latencies: per tenant, from its Create call to the first time it is seen Ready, sorted.
	latencies                         []time.Duration
	floorRequests, controllerRequests requests
}

func (r result) ratio() float64 { return r.controller.Seconds() / r.floor.Seconds() }

// leastRatio is the ratio no controller can go below: the floor plus the Tenant objects alone.
func (r result) leastRatio() float64 { return 1 + r.tenantObjects.Seconds()/r.floor.Seconds() }

// latency is the q quantile of the per-tenant latencies.
func (r result) latency(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, int(q*float64(len(r.latencies))))]
}

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
		convert(tenancy.ResourceQuota(p.Namespace, tenancy.OwnQuota(n.t, children, nil)), rq)
		objs = append(objs, rq)
		for _, np := range tenancy.NetworkPolicies(p, n.t) {
			o := &networkingv1.NetworkPolicy{}
			convert(np, o)
			objs = append(objs, o)
		}
		// The delivery namespace and the apps' identities' two bindings.
		dns := &corev1.Namespace{}
		convert(tenancy.DeliveryNamespace(n.place, "uid"), dns)
		dns.Name = "floor-" + dns.Name
		inTenant, inDelivery := &rbacv1.RoleBinding{}, &rbacv1.RoleBinding{}
		convert(tenancy.DeliveryRoleBinding(p.Namespace, n.place.Namespace, tenancyv1.DeliveryClusterRole), inTenant)
		convert(tenancy.DeliveryRoleBinding(dns.Name, n.place.Namespace, tenancyv1.DeliveryStorageClusterRole), inDelivery)
		objs = append(objs, dns, inTenant, inDelivery)
		for _, o := range objs {
			// The same labels, but not the controller's: its caches select its own objects by
			// label, and must not hold the floor's too (that would double its memory here).
			if l := o.GetLabels(); l["app.kubernetes.io/managed-by"] == tenancy.FieldOwner {
				l["app.kubernetes.io/managed-by"] = "bench-floor"
			}
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
func measureController(ctx context.Context, b *testing.B, cfg *rest.Config, c client.Client, tree []node) (time.Duration, []time.Duration) {
	seen, err := cache.New(cfg, cache.Options{Scheme: c.Scheme()})
	check(b, err)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, o := range []client.Object{&corev1.Namespace{}, &tenancyv1.Tenant{}} {
		_, err := seen.GetInformer(cctx, o)
		check(b, err)
	}
	// Each tenant's latency: from the start of the Create call that made it to the first time it
	// is seen Ready for its generation.
	var mu sync.Mutex
	created, ready := map[string]time.Time{}, map[string]time.Time{}
	tenantInformer, err := seen.GetInformer(cctx, &tenancyv1.Tenant{})
	check(b, err)
	onTenant := func(o any) {
		if t, ok := o.(*tenancyv1.Tenant); ok && isReady(t) {
			mu.Lock()
			if _, ok := ready[t.Namespace+"/"+t.Name]; !ok {
				ready[t.Namespace+"/"+t.Name] = time.Now()
			}
			mu.Unlock()
		}
	}
	_, err = tenantInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onTenant, UpdateFunc: func(_, o any) { onTenant(o) }})
	check(b, err)
	go func() { _ = seen.Start(cctx) }()
	seen.WaitForCacheSync(cctx)

	start := time.Now()
	check(b, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootNamespace}}))
	parallel(b, tree, func(n node) error {
		deadline := time.Now().Add(time.Duration(max(1, tenants/1000)) * 5 * time.Minute)
		for {
			parentReady := true
			if n.place.Parent.Name != "" {
				parentReady = seen.Get(ctx, n.place.Parent, &tenancyv1.Tenant{}) == nil &&
					seen.Get(ctx, types.NamespacedName{Name: n.t.Namespace}, &corev1.Namespace{}) == nil
			}
			if parentReady {
				at := time.Now()
				err := c.Create(ctx, n.t.DeepCopy())
				if err == nil {
					mu.Lock()
					created[n.t.Namespace+"/"+n.t.Name] = at
					mu.Unlock()
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
		nready := 0
		for i := range list.Items {
			if isReady(&list.Items[i]) {
				nready++
			}
		}
		if nready == tenants {
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			latencies := make([]time.Duration, 0, len(created))
			for k, at := range created {
				latencies = append(latencies, ready[k].Sub(at))
			}
			slices.Sort(latencies)
			return took, latencies
		}
		if limit := time.Duration(max(1, tenants/1000)) * 15 * time.Minute; time.Since(start) > limit {
			b.Fatalf("only %d of %d tenants Ready after %s", nready, tenants, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isReady(t *tenancyv1.Tenant) bool {
	for _, cond := range t.Status.Conditions {
		if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue && t.Status.ObservedGeneration == t.Generation {
			return true
		}
	}
	return false
}

// parallel runs fn over the tree in order, `workers` at a time (order matters only in that a
// worker starts tenants in tree order).
func parallel[T any](b *testing.B, tree []T, fn func(T) error) {
	work := make(chan T)
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
func startController(b *testing.B, env *testenv.Env, webhookPort int) (*exec.Cmd, string, string) {
	dir := b.TempDir()
	// BENCH_CONTROLLER_BIN runs a binary built elsewhere (another commit, for a before/after).
	bin := os.Getenv("BENCH_CONTROLLER_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "tenant-controller")
		check(b, testenv.BuildProgram(context.Background(), ".", "../../cmd", bin))
	}
	user, err := env.AddUser(envtest.User{Name: "tenant-controller", Groups: []string{"system:masters"}}, nil)
	check(b, err)
	kubeconfig, err := user.KubeConfig()
	check(b, err)
	check(b, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))
	metrics, pprof := fmt.Sprintf("127.0.0.1:%d", freePort(b)), fmt.Sprintf("127.0.0.1:%d", freePort(b))
	cmd := exec.Command(bin, "--metrics-bind-address="+metrics, "--health-probe-bind-address=127.0.0.1:0", "--pprof-bind-address="+pprof,
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
	return cmd, metrics, pprof
}

// waitForTenantAdmission waits until kube-apiserver's admission policies know the Tenant type (a
// few seconds after its CRD is installed): a dry-run create in a namespace where no Tenant may live
// is refused by the webhook (422), not by admission not knowing the type.
func waitForTenantAdmission(ctx context.Context, b *testing.B, c client.Client) {
	probe := &tenancyv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}}
	waitAdmitted(ctx, b, c, probe, apierrors.IsInvalid)
}

// waitAdmitted retries a dry-run create of probe until it is admitted, or refused with an error
// for which refused is true.
func waitAdmitted(ctx context.Context, b *testing.B, c client.Client, probe client.Object, refused func(error) bool) {
	for i := 0; ; i++ {
		err := c.Create(ctx, probe.DeepCopyObject().(client.Object), client.DryRunAll)
		if err == nil || refused(err) {
			return
		}
		if i > 300 {
			b.Fatalf("a dry-run create is still not admitted: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writes sums the controller's non-GET API requests from its client-go metrics.
func writes(b *testing.B, addr string) int {
	return metric(b, addr, "rest_client_requests_total", `method="GET"`)
}

// metric sums the samples of a counter from a Prometheus endpoint, leaving out those whose labels
// contain exclude.
func metric(b *testing.B, addr, name, exclude string) int {
	raw, err := httpGet("http://" + addr + "/metrics")
	check(b, err)
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
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

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// profile saves a 20-second CPU profile, taken from the start of the controller phase, of
// kube-apiserver (BENCH_APISERVER_PROFILE) or the controller (BENCH_CONTROLLER_PROFILE), to see
// where the time goes: go tool pprof -top FILE.
func profile(get func(context.Context) ([]byte, error), out string) {
	raw, err := get(context.Background())
	if err != nil {
		progress("profile: %v", err)
		return
	}
	_ = os.WriteFile(out, raw, 0o644)
}

// requests counts kube-apiserver requests by "VERB resource[/subresource]".
type requests map[string]float64

func (r requests) minus(o requests) requests {
	out := requests{}
	for k, v := range r {
		if d := v - o[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func (r requests) total() float64 {
	sum := 0.0
	for _, v := range r {
		sum += v
	}
	return sum
}

// apiRequests reads kube-apiserver's apiserver_request_total, and the calls it made to admission
// webhooks (as "WEBHOOK operation"), from its /metrics.
func apiRequests(b *testing.B, cs kubernetes.Interface) requests {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	check(b, err)
	out := requests{}
	for _, line := range strings.Split(string(raw), "\n") {
		var name string
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			l := labelsOf(line)
			if l["verb"] == "WATCH" || l["verb"] == "CONNECT" {
				continue // long-running: a count of streams, not of work
			}
			name = l["verb"] + " " + l["resource"]
			if l["subresource"] != "" {
				name += "/" + l["subresource"]
			}
		case strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds_count{"):
			l := labelsOf(line)
			name = "WEBHOOK " + l["operation"] + " (" + l["type"] + ")"
		default:
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		check(b, err)
		out[name] += v
	}
	return out
}

// labelsOf parses the labels of one Prometheus sample line (values without commas or quotes).
func labelsOf(line string) map[string]string {
	out := map[string]string{}
	inner := line[strings.IndexByte(line, '{')+1 : strings.LastIndexByte(line, '}')]
	for _, kv := range strings.Split(inner, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// tenantEvents counts the Events posted about Tenants.
func tenantEvents(ctx context.Context, b *testing.B, c client.Client) int {
	list := &eventsv1.EventList{}
	check(b, c.List(ctx, list))
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Kind == "Tenant" {
			n++
		}
	}
	return n
}

// pidOf finds the process named name that this process started (the control plane of this run).
func pidOf(b *testing.B, name string) int {
	pid, err := testenv.ChildPID(name)
	check(b, err)
	return pid
}

func stat(b *testing.B, pid int) testenv.ProcStat {
	st, err := testenv.ProcessStat(pid)
	check(b, err)
	return st
}

// cpuSeconds reads the user+system CPU time of a process.
func cpuSeconds(b *testing.B, pid int) float64 { return stat(b, pid).CPU.Seconds() }

// peakRSS reads VmHWM (KiB) of a process.
func peakRSS(b *testing.B, pid int) int { return int(stat(b, pid).PeakRSS / 1024) }

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
	n := float64(tenants)
	cpuRatio := r.apiserverControllerCPU / r.apiserverFloorCPU
	depth := 0
	for _, n := range makeTree() {
		depth = max(depth, n.place.Depth)
	}
	section := "tenant-controller"
	if tenants != 1000 {
		section = fmt.Sprintf("tenant-controller-%d", tenants)
	}
	body := fmt.Sprintf(`## tenant-controller: a %d-tenant tree (depth %d) to all Ready

| figure | value | goal |
|---|---|---|
| floor: the same namespaces, role bindings, quotas, network policies and delivery namespaces with their ServiceAccount and bindings, created directly with client-go (%d in parallel) | %.1f s | |
| tenant-controller: first Tenant created → all %d Ready (a client creating each tenant once its parent exists) | %.1f s | |
| ratio controller / floor | **%.2f×** | ≤ 1.5× (%s) |
| the Tenant objects alone, on a twin of the Tenant CRD with no controller, webhook or watcher: each created, its status written once, one Event (%d in parallel) | %.1f s (kube-apiserver CPU %.1f s) | |
| the least any controller can reach, (floor + the Tenant objects alone) / floor: time / kube-apiserver CPU | %.2f× / %.2f× | |
| per-tenant latency, Create call → seen Ready: p50 / p99 | %.1f s / **%.1f s** | p99 ≤ 10 s (%s) |
| kube-apiserver CPU: floor / controller phase | %.1f s / %.1f s (**%.2f×**) | ≤ 1.5× (%s) |
| etcd CPU: floor / controller phase | %.1f s / %.1f s | |
| kube-apiserver requests per tenant: floor / controller phase (all clients, without watches) | %.1f / %.1f | |
| controller: API writes per tenant until converged (its client-go metrics) | %.1f | |
| API writes by the controller in the %d s after convergence | **%d** | 0 (%s) |
| Events posted about Tenants | %d | one per tenant's first Ready |
| controller peak RSS (VmHWM) | %.0f MiB | |
| controller CPU, reconciles, API writes until converged | %.1f s, %d, %d | |

The controller runs as its own process (the real binary, %d workers) with its admission webhooks
in the path of every Tenant create; the floor makes plain creates with no controller, webhook, Tenant
objects or status. See `+"`services/tenant-controller/internal/bench`"+`.

Requests per tenant by verb and resource (kube-apiserver's `+"`apiserver_request_total`"+`, and its
calls to admission webhooks; the controller phase includes the bench client's own Tenant creates
and the reads of its informers):

| request | floor | controller phase |
|---|---|---|
%s`, tenants, depth, workers, r.floor.Seconds(), tenants, r.controller.Seconds(), r.ratio(), status(r.ratio() <= 1.5),
		workers, r.tenantObjects.Seconds(), r.apiserverTenantObjectsCPU, r.leastRatio(), 1+r.apiserverTenantObjectsCPU/r.apiserverFloorCPU,
		r.latency(0.50).Seconds(), r.latency(0.99).Seconds(), status(r.latency(0.99) <= 10*time.Second),
		r.apiserverFloorCPU, r.apiserverControllerCPU, cpuRatio, status(cpuRatio <= 1.5), r.etcdFloorCPU, r.etcdControllerCPU,
		r.floorRequests.total()/n, r.controllerRequests.total()/n, float64(r.writes)/n,
		int(quietPeriod.Seconds()), r.quietWrites, status(r.quietWrites == 0), r.events, float64(r.peakRSSKiB)/1024,
		r.controllerCPU, r.reconciles, r.writes, workers, requestRows(r.floorRequests, r.controllerRequests, n))
	check(b, testenv.WriteBenchSection(out, section, body))
}

// requestRows lists the requests either phase made at least 0.05 times per tenant, most frequent
// in the controller phase first.
func requestRows(floor, controller requests, n float64) string {
	keys := map[string]bool{}
	for k := range floor {
		keys[k] = true
	}
	for k := range controller {
		keys[k] = true
	}
	var rows []string
	for k := range keys {
		if floor[k]/n >= 0.05 || controller[k]/n >= 0.05 {
			rows = append(rows, k)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if controller[rows[i]] != controller[rows[j]] {
			return controller[rows[i]] > controller[rows[j]]
		}
		return rows[i] < rows[j]
	})
	var out strings.Builder
	for _, k := range rows {
		fmt.Fprintf(&out, "| %s | %.2f | %.2f |\n", k, floor[k]/n, controller[k]/n)
	}
	return out.String()
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

// twinGroup serves a copy of the Tenant CRD (installTwin).
const twinGroup = "bench.flotilla.dev"

// installTwin installs the Tenant CRD a second time, under twinGroup: the same schema, validation
// rules and status subresource, with no controller, webhook or admission policy behind it.
func installTwin(ctx context.Context, b *testing.B, c client.Client) {
	raw, err := os.ReadFile(filepath.Join(chart, "crds", "tenancy.flotilla.dev_tenants.yaml"))
	check(b, err)
	crd := &unstructured.Unstructured{}
	check(b, yaml.Unmarshal(raw, &crd.Object))
	crd.SetName("tenants." + twinGroup)
	check(b, unstructured.SetNestedField(crd.Object, twinGroup, "spec", "group"))
	check(b, c.Create(ctx, crd))
	probe := &unstructured.Unstructured{}
	probe.SetAPIVersion(twinGroup + "/v1alpha1")
	probe.SetKind("Tenant")
	probe.SetNamespace("default")
	probe.SetName("probe")
	waitAdmitted(ctx, b, c, probe, func(error) bool { return false })
}

// measureTenantObjects measures what any controller of Tenants costs beyond the floor, whatever
// its design: each tenant of the tree created, its status written once (as the controller left
// the real one) and one Event, `workers` at a time, on the twin of the Tenant CRD. Without the
// admission webhook and policy, and with no one watching, it is a lower bound.
func measureTenantObjects(ctx context.Context, b *testing.B, c client.Client, tree []node) time.Duration {
	done := &tenancyv1.TenantList{}
	check(b, c.List(ctx, done))
	status := map[types.NamespacedName]tenancyv1.TenantStatus{}
	for _, t := range done.Items {
		status[client.ObjectKeyFromObject(&t)] = t.Status
	}
	// One twin and its status write per tenant, made before the clock starts.
	type twin struct {
		t      *unstructured.Unstructured
		status []byte
	}
	twins := make([]twin, len(tree))
	for i, n := range tree {
		twins[i].t = &unstructured.Unstructured{}
		convert(n.t, &twins[i].t.Object)
		delete(twins[i].t.Object, "status")
		twins[i].t.SetAPIVersion(twinGroup + "/v1alpha1")
		twins[i].t.SetKind("Tenant")
		raw, err := json.Marshal(status[client.ObjectKeyFromObject(n.t)])
		check(b, err)
		twins[i].status = raw
	}
	start := time.Now()
	parallel(b, twins, func(w twin) error {
		t := w.t
		if err := c.Create(ctx, t); err != nil {
			return err
		}
		// As the controller writes it: a merge patch, refused if the tenant changed since it was read.
		body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":%s}`, t.GetResourceVersion(), w.status)
		if err := c.Status().Patch(ctx, t, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
			return err
		}
		return c.Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: t.GetNamespace(), Name: fmt.Sprintf("%s.%x", t.GetName(), time.Now().UnixNano())},
			Regarding: corev1.ObjectReference{APIVersion: t.GetAPIVersion(), Kind: "TenantTwin", Namespace: t.GetNamespace(),
				Name: t.GetName(), UID: t.GetUID()},
			EventTime: metav1.NowMicro(), ReportingController: "bench", ReportingInstance: "bench", Action: "Reconcile",
			Type: corev1.EventTypeNormal, Reason: "Ready", Note: "Tenant is Ready",
		})
	})
	return time.Since(start)
}
