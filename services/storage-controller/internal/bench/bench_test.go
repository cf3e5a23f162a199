package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/extender"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
)

var (
	nodes   = envInt("BENCH_NODES", 1000)
	volumes = envInt("BENCH_VOLUMES", 10000)
	pods    = envInt("BENCH_PODS", 300)
)

const (
	zones    = 10
	replicas = 3
	rounds   = 5 // of the runs without, with a do-nothing and with the extender
	runs     = 1 + 3*rounds
	requests = 2000
	gib      = 1024 * 1024 // KiB
)

var chart = filepath.Join("..", "..", "..", "..", "deploy", "charts", "storage-controller")

// BenchmarkStorage reports, in one run:
//   - the extender's filter + prioritize latency, p50 and p99, over HTTP as kube-scheduler calls
//     it (node names only), at 1,000 nodes and 10,000 volumes of 3 replicas, against the floor of
//     the same exchange with a handler that only decodes the request, keeps every node and scores none;
//   - pods bound per second by the real kube-scheduler with the extender, as a ratio to the same
//     scheduler without it, the same pods and nodes, in the same run (the median of the ratios
//     of `rounds` rounds);
//   - the storage-controller's resident memory with LINSTOR holding 10,000 volumes, against the
//     same binary with an empty LINSTOR.
func BenchmarkStorage(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	b.StopTimer()
	ctx := context.Background()
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = storagepolicyv1.AddToScheme(scheme)
	env, err := testenv.Start(testenv.Options{CRDDirs: []string{filepath.Join(chart, "crds")}, Scheme: scheme})
	check(b, err)
	defer func() { _ = env.Stop() }()
	c := env.Client

	progress("LINSTOR test double: %d nodes in %d zones, %d volumes of %d replicas", nodes, zones, volumes, replicas)
	double := linstordouble.New(linstordouble.Options{})
	for i := range nodes {
		double.AddNode(nodeName(i), map[string]string{"Aux/topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%zones)},
			linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 100_000 * gib, FreeKiB: 100_000 * gib})
	}
	srv := httptest.NewServer(double.Handler())
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	lc, err := linstor.NewWithHTTPClient(base, &http.Client{Timeout: time.Minute}, ctrl.Log)
	check(b, err)
	spawn(ctx, b, srv.URL)

	progress("Nodes, and %d pods' claims bound to LINSTOR volumes", runs*pods)
	parallel(nodes, func(i int) { makeNode(ctx, b, c, nodeName(i), fmt.Sprintf("zone-%d", i%zones)) })
	check(b, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}))
	parallel(runs*pods, func(i int) { boundClaim(ctx, b, c, fmt.Sprintf("vol-%d", i)) })

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	check(b, err)
	// Polled once, below, and not during the runs: a poll of 10,000 volumes (timed on its own)
	// would land in one run of several at random, with the LINSTOR double serving it from this
	// process too.
	view := linstor.NewView(lc, 24*time.Hour, ctrl.Log)
	check(b, mgr.Add(view))
	x := &extender.Extender{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), View: view, ZoneKey: "topology.kubernetes.io/zone"}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		b.Fatal("cache did not sync")
	}
	// The cache's informers for what the extender reads start on first use: prime them.
	check(b, mgr.GetCache().List(ctx, &corev1.PersistentVolumeClaimList{}))
	check(b, mgr.GetCache().List(ctx, &corev1.PersistentVolumeList{}))
	pollStart := time.Now()
	view.Refresh(ctx)
	var r result
	r.poll = time.Since(pollStart)
	xsrv := httptest.NewServer(x.Handler())
	defer xsrv.Close()
	floor := httptest.NewServer(http.HandlerFunc(floorHandler))
	defer floor.Close()

	progress("extender: %d filter+prioritize exchanges, and as many with the floor handler", requests)
	r.floor = exchanges(ctx, b, c, floor.URL)
	b.StartTimer()
	r.extender = exchanges(ctx, b, c, xsrv.URL)
	b.StopTimer()
	r.work = inProcess(ctx, b, x)

	dir := b.TempDir()
	extenderAt := func(u string) []schedconfigv1.Extender {
		return []schedconfigv1.Extender{{URLPrefix: u, FilterVerb: "filter", PrioritizeVerb: "prioritize",
			Weight: 5, NodeCacheCapable: true, Ignorable: true, HTTPTimeout: metav1.Duration{Duration: 2 * time.Second}}}
	}
	type run struct {
		what string
		opts testenv.SchedulerOptions
		into *[]binding
	}
	all := []run{{"without the extender (default scoring)", testenv.SchedulerOptions{}, &r.defaults}}
	for round := range rounds {
		trio := []run{
			{"without the extender, scoring every node", testenv.SchedulerOptions{PercentageOfNodesToScore: 100}, &r.without},
			// What any extender costs kube-scheduler: one that decodes the request, keeps every node and scores none.
			{"with a do-nothing extender, scoring every node", testenv.SchedulerOptions{PercentageOfNodesToScore: 100, Extenders: extenderAt(floor.URL)}, &r.floorBound},
			// As docs say to run it: every feasible node is shown to the extender.
			{"with the extender, scoring every node", testenv.SchedulerOptions{PercentageOfNodesToScore: 100, Extenders: extenderAt(xsrv.URL)}, &r.with},
		}
		// Each takes each place once: the machine's speed drifts over a bench.
		k := round % len(trio)
		all = append(append(all, trio[k:]...), trio[:k]...)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	check(b, err)
	for i, run := range all {
		progress("kube-scheduler %s: %d pods", run.what, pods)
		sched, err := env.StartScheduler(dir, run.opts)
		check(b, err)
		ready(ctx, b, c, cs, i)
		*run.into = append(*run.into, bindPods(ctx, b, c, cs, i*pods))
		if run.into == &r.with {
			r.local += localPods(ctx, b, c, double, i)
		}
		sched.Stop()
		// Every run starts from the same cluster: kube-scheduler's filters look at the pods
		// already on each node, so a run after others would otherwise have more to look at.
		deletePods(ctx, b, c, i)
	}

	progress("storage-controller memory: empty LINSTOR, then %d volumes", volumes)
	empty := httptest.NewServer(linstordouble.New(linstordouble.Options{}).Handler())
	defer empty.Close()
	r.rssEmpty = controllerRSS(b, env, empty.URL)
	r.rssFull = controllerRSS(b, env, srv.URL)

	b.ReportMetric(r.work.p(0.99).Seconds()*1000, "extender-p99-ms")
	b.ReportMetric(ratio(r.with, r.without), "bind-ratio")
	b.ReportMetric(float64(r.rssFull)/1024, "rss-MiB")
	write(b, r)
}

// processes whose CPU time a run reports per pod: the pods' path through the control plane, and
// this process, which serves the extender (and creates and watches the pods: the harness).
var processes = []string{"kube-scheduler", "kube-apiserver", "etcd", "bench.test"}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// spawn makes the volumes through LINSTOR's API, as the CSI driver's provisioner does.
func spawn(ctx context.Context, b *testing.B, linstorURL string) {
	body := `{"name":"flotilla-bench","select_filter":{"place_count":3,"storage_pool_list":["ssd"],"replicas_on_different":["Aux/topology.kubernetes.io/zone"]}}`
	post(b, linstorURL+"/v1/resource-groups", body)
	parallel(volumes, func(i int) {
		post(b, linstorURL+"/v1/resource-groups/flotilla-bench/spawn", fmt.Sprintf(`{"resource_definition_name":"vol-%d","volume_sizes":[%d]}`, i, gib))
	})
}

// parallel calls do(0..n-1), eight at a time: the setup's many small requests.
func parallel(n int, do func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				do(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

func post(b *testing.B, u, body string) {
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	check(b, err)
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		b.Fatalf("POST %s: %s", u, resp.Status)
	}
}

func makeNode(ctx context.Context, b *testing.B, c client.Client, name, zone string) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}}}
	check(b, c.Create(ctx, n))
	n.Spec.Taints = nil // kube-apiserver taints a new Node not-ready; no kubelet runs here
	check(b, c.Update(ctx, n))
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("500")}
	n.Status.Capacity, n.Status.Allocatable = capacity, capacity
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	check(b, c.Status().Update(ctx, n))
}

// boundClaim makes LINSTOR volume rd's PersistentVolume and a claim bound to it, as the CSI
// provisioner and the PV controller would.
func boundClaim(ctx context.Context, b *testing.B, c client.Client, rd string) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: rd, Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("bench"), VolumeName: rd,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	check(b, c.Create(ctx, pvc))
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: rd}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: "bench", Capacity: pvc.Spec.Resources.Requests, AccessModes: pvc.Spec.AccessModes,
		ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "bench", Name: rd, UID: pvc.UID, APIVersion: "v1"},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: storagepolicyv1.CSIDriver, VolumeHandle: rd}},
	}}
	check(b, c.Create(ctx, pv))
	pv.Status.Phase = corev1.VolumeBound
	check(b, c.Status().Update(ctx, pv))
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes, Capacity: pv.Spec.Capacity}
	check(b, c.Status().Update(ctx, pvc))
}

// runLabel holds which run a pod belongs to (its index / pods), so that a run waits on its own pods.
const runLabel = "bench-run"

func pod(i int) *corev1.Pod {
	name := fmt.Sprintf("vol-%d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, Labels: map[string]string{runLabel: strconv.Itoa(i / pods)}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "db", Image: "postgres",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		},
	}
}

// floorHandler is the least any extender does: decode the request as the extender does, keep every
// node, score none (an empty list: a node it leaves out scores 0).
func floorHandler(w http.ResponseWriter, r *http.Request) {
	args, err := extender.Decode(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var out any = &extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames}
	if strings.HasSuffix(r.URL.Path, "/prioritize") {
		out = &extenderv1.HostPriorityList{}
	}
	_ = json.NewEncoder(w).Encode(out)
}

type durations []time.Duration

func (d durations) p(q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// exchanges times filter then prioritize, as kube-scheduler sends them for one pod, over all nodes.
func exchanges(ctx context.Context, b *testing.B, c client.Client, base string) durations {
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = nodeName(i)
	}
	hc := &http.Client{}
	out := make(durations, 0, requests)
	for i := range requests {
		body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod(i % (4 * pods)), NodeNames: &names})
		check(b, err)
		start := time.Now()
		for _, verb := range []string{"/filter", "/prioritize"} {
			resp, err := hc.Post(base+verb, "application/json", bytes.NewReader(body))
			check(b, err)
			var sink json.RawMessage
			check(b, json.NewDecoder(resp.Body).Decode(&sink))
			_ = resp.Body.Close()
		}
		out = append(out, time.Since(start))
	}
	return out
}

// inProcess times the extender's own work for filter then prioritize, without HTTP and JSON.
func inProcess(ctx context.Context, b *testing.B, x *extender.Extender) durations {
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = nodeName(i)
	}
	out := make(durations, 0, requests)
	for i := range requests {
		args := &extenderv1.ExtenderArgs{Pod: pod(i % (4 * pods)), NodeNames: &names}
		start := time.Now()
		_, err := x.Filter(ctx, args)
		check(b, err)
		_, err = x.Prioritize(ctx, args)
		check(b, err)
		out = append(out, time.Since(start))
	}
	return out
}

// binding is one run: how long its pods took to be bound.
type binding struct {
	took time.Duration
	cpu  map[string]time.Duration // per pod, by process
}

func (b binding) perSecond() float64 { return float64(pods) / b.took.Seconds() }

// rates are the runs' pods bound per second.
func rates(v []binding) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		out[i] = v[i].perSecond()
	}
	return out
}

// ratio is the median of the rounds' ratios of a's pods bound per second to b's.
func ratio(a, b []binding) float64 {
	rs := rates(a)
	for i, r := range rates(b) {
		rs[i] /= r
	}
	return testenv.Median(rs)
}

// ratios lists the rounds' ratios of a's pods bound per second to b's.
func ratios(a, b []binding) string {
	out := make([]string, len(a))
	for i := range a {
		out[i] = fmt.Sprintf("%.2f", a[i].perSecond()/b[i].perSecond())
	}
	return strings.Join(out, ", ")
}

// ready waits until the newly started kube-scheduler binds a pod (with no volume: an extender keeps
// every node for it), then deletes it: a run's time starts with a scheduler that has synced.
func ready(ctx context.Context, b *testing.B, c client.Client, cs kubernetes.Interface, run int) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("ready-%d", run), Labels: map[string]string{runLabel: "ready"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "pause"}}},
	}
	waitBound(ctx, b, cs, "ready", 1, func() { check(b, c.Create(ctx, p)) })
	deletePods(ctx, b, c, "ready")
}

// bindPods creates pods first..first+pods and waits until the scheduler has bound them all.
func bindPods(ctx context.Context, b *testing.B, c client.Client, cs kubernetes.Interface, first int) binding {
	var start time.Time
	before := testenv.CPUByName()
	waitBound(ctx, b, cs, strconv.Itoa(first/pods), pods, func() {
		start = time.Now()
		var wg sync.WaitGroup
		for i := first; i < first+pods; i++ {
			wg.Go(func() { check(b, c.Create(ctx, pod(i))) })
		}
		wg.Wait()
	})
	took, after := time.Since(start), testenv.CPUByName()
	cpu := map[string]time.Duration{}
	for _, p := range processes {
		cpu[p] = (after[p] - before[p]) / time.Duration(pods)
	}
	return binding{took: took, cpu: cpu}
}

// waitBound watches the pods labelled run, calls create, and returns once n of them are bound to a
// node. It watches rather than lists: a list of every pod of a run every few milliseconds would
// load kube-apiserver the more, the slower the run. The watch resumes where it was if kube-apiserver
// ends it (it does when a watcher falls behind a burst of events).
func waitBound(ctx context.Context, b *testing.B, cs kubernetes.Interface, run string, n int, create func()) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: runLabel + "=" + run}
	list, err := cs.CoreV1().Pods("bench").List(ctx, sel)
	check(b, err)
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.LabelSelector
			return cs.CoreV1().Pods("bench").Watch(ctx, o)
		}})
	check(b, err)
	defer w.Stop()
	create()
	bound := map[string]bool{}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			b.Fatalf("run %s: watching pods: %v", run, apierrors.FromObject(ev.Object))
		}
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			bound[p.Name] = true
		}
		if len(bound) == n {
			return
		}
	}
	b.Fatalf("run %s: %d of %d pods bound before the watch ended (%v)", run, len(bound), n, ctx.Err())
}

// deletePods deletes the pods labelled run at once (no kubelet runs to end them gracefully) and
// waits until they are gone.
func deletePods(ctx context.Context, b *testing.B, c client.Client, run any) {
	sel := client.MatchingLabels{runLabel: fmt.Sprint(run)}
	check(b, c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("bench"), sel, client.GracePeriodSeconds(0)))
	for {
		var list corev1.PodList
		check(b, c.List(ctx, &list, client.InNamespace("bench"), sel))
		if len(list.Items) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// localPods counts the pods of run bound to a node holding their data.
func localPods(ctx context.Context, b *testing.B, c client.Client, d *linstordouble.Double, run int) int {
	var list corev1.PodList
	check(b, c.List(ctx, &list, client.InNamespace("bench"), client.MatchingLabels{runLabel: strconv.Itoa(run)}))
	local := 0
	for _, p := range list.Items {
		if slices.ContainsFunc(d.Replicas(p.Name), func(r linstordouble.Replica) bool { return r.Node == p.Spec.NodeName && r.Pool != "" }) {
			local++
		}
	}
	return local
}

// controllerRSS builds and runs the storage-controller against the LINSTOR at linstorURL, waits
// until it has polled it twice, and returns its resident memory in KiB.
func controllerRSS(b *testing.B, env *testenv.Env, linstorURL string) int64 {
	bin := filepath.Join(b.TempDir(), "storage-controller")
	if err := testenv.BuildProgram(context.Background(), ".", "../../cmd", bin); err != nil {
		b.Fatal(err)
	}
	logDir := b.TempDir()
	kubeconfig, err := env.AdminKubeconfig("storage-controller", logDir)
	check(b, err)
	cmd := exec.Command(bin, "--linstor-endpoint="+linstorURL, "--linstor-poll-interval=2s", "--webhook-port=0",
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--extender-bind-address=127.0.0.1:"+freePort(b))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	check(b, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(8 * time.Second) // three polls
	st, err := testenv.ProcessStat(cmd.Process.Pid)
	check(b, err)
	return int64(st.RSS / 1024)
}

func freePort(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(b, err)
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

type result struct {
	floor, extender   durations
	work              durations
	defaults          []binding // one run
	floorBound        []binding // one a round, as are without and with
	without, with     []binding
	local             int
	rssEmpty, rssFull int64
	poll              time.Duration // the first poll of LINSTOR, the double in this process
}

func write(b *testing.B, r result) {
	body := fmt.Sprintf(`## storage-controller: scheduling next to the data, and memory

LINSTOR test double with %d nodes in %d zones and %d volumes of %d replicas; the extender answers
from the controller's polled view of it and the manager's cache of claims and volumes.

| figure | measured | baseline (same run) | ratio | goal |
|---|---|---|---|---|
| extender filter + prioritize, its own work (no HTTP), p50 / p99 | %.3f ms / %.3f ms | | | p99 ≤ 2 ms |
| extender filter + prioritize over HTTP, p50 | %.2f ms | %.2f ms (a handler that only decodes as the extender does, keeps every node and scores none) | %.2f× | |
| extender filter + prioritize over HTTP, p99 | %.2f ms | %.2f ms | %.2f× | |
| pods bound per second by kube-scheduler, every node scored | %.1f with the extender | %.1f without it | %.2f (rounds: %s) | ≥ 0.8 |
| pods bound per second, default scoring without the extender | | %.1f | %.2f (with the extender, every node scored) | |
| pods bound per second with a do-nothing extender, every node scored | %.1f | %.1f (without any) | %.2f (rounds: %s; what the extender protocol costs) | |
| pods bound next to a replica of their volume | %d of %d with the extender | | | |
| storage-controller resident memory | %.0f MiB with %d volumes | %.0f MiB with an empty LINSTOR | %.2f× | |
| one poll of LINSTOR (nodes, pools and every resource), the LINSTOR double serving it in the same process | %.0f ms | | | bounded: every 30 s by default |

CPU time per pod bound, by process (medians of the rounds; "this process" serves the extender and
creates and watches the pods, which alone costs what it shows without an extender):

| run | kube-scheduler | kube-apiserver | etcd | this process | all |
|---|---|---|---|---|---|
%s
Each exchange is filter then prioritize for one pod with one volume over all %d node names, over
HTTP as kube-scheduler sends them (nodeCacheCapable). Pods: %d per run with claims bound to LINSTOR
volumes, created at once, timed until all are bound; %d rounds of the runs without, with a
do-nothing and with the extender, which take turns to go first (pods bound per second: the
medians of the rounds; ratios: the median of the rounds' own); kube-scheduler v1.37.2 with its default
profile, the extender weighted 5 and ignorable. By default kube-scheduler scores only the first
feasible nodes it finds in a large cluster (about 40%% of 1,000), which often leaves out the nodes
that hold a pod's data; the extender is run with percentageOfNodesToScore 100, and compared with the
same scheduler without it, and with an extender that does nothing (decodes the request as the
extender does, keeps every node, scores none): what kube-scheduler's extender protocol itself costs
(two synchronous HTTP calls per pod, each carrying every feasible node). The extender's prioritize
answer lists only the nodes that score (a node it leaves out scores 0): here the three holding
the pod's volume, which are always candidates; a volume none of whose replicas' nodes is a candidate
would also list every node in their zones. The claims and volumes in the API are only the
pods' (%d); the extender's cost per request does not depend on how many others exist (one cache
lookup per claim). Every run starts from a cluster without pods (each run's pods are deleted after
it) and with a newly started kube-scheduler that has bound one pod; its time runs from the first
create to the last binding seen on a watch. The extender's view of LINSTOR is polled once before the
runs and not during them: a poll would land in one run of several at random.
`, nodes, zones, volumes, replicas,
		ms(r.work.p(0.5)), ms(r.work.p(0.99)),
		ms(r.extender.p(0.5)), ms(r.floor.p(0.5)), float64(r.extender.p(0.5))/float64(r.floor.p(0.5)),
		ms(r.extender.p(0.99)), ms(r.floor.p(0.99)), float64(r.extender.p(0.99))/float64(r.floor.p(0.99)),
		testenv.Median(rates(r.with)), testenv.Median(rates(r.without)), ratio(r.with, r.without), ratios(r.with, r.without),
		testenv.Median(rates(r.defaults)), testenv.Median(rates(r.with))/testenv.Median(rates(r.defaults)),
		testenv.Median(rates(r.floorBound)), testenv.Median(rates(r.without)), ratio(r.floorBound, r.without), ratios(r.floorBound, r.without),
		r.local, rounds*pods,
		float64(r.rssFull)/1024, volumes, float64(r.rssEmpty)/1024, float64(r.rssFull)/float64(r.rssEmpty), ms(r.poll),
		cpuRows(map[string][]binding{"without an extender": r.without, "a do-nothing extender": r.floorBound, "the extender": r.with}),
		nodes, pods, rounds, runs*pods)
	fmt.Println(body)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		check(b, testenv.WriteBenchSection(out, "storage-controller", body))
	}
}

// cpuRows is a table row per kind of run: its median CPU time per pod in each process.
func cpuRows(runs map[string][]binding) string {
	var out strings.Builder
	for _, what := range []string{"without an extender", "a do-nothing extender", "the extender"} {
		fmt.Fprintf(&out, "| %s |", what)
		var all float64
		for _, p := range processes {
			per := make([]float64, len(runs[what]))
			for i, b := range runs[what] {
				per[i] = ms(b.cpu[p])
			}
			all += testenv.Median(per)
			fmt.Fprintf(&out, " %.2f ms |", testenv.Median(per))
		}
		fmt.Fprintf(&out, " %.2f ms |\n", all)
	}
	return out.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		var n int
		if _, err := fmt.Sscanf(v, "%d", &n); err == nil {
			return n
		}
	}
	return def
}
