package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

const platformNamespace = "flotilla-system"

// scraped starts VictoriaMetrics on the machine, finding Flotilla's metrics endpoints as a platform's
// does (Kubernetes service discovery over EndpointSlices): the controllers' (Service ports named
// metrics) and the aggregated API servers' (their secure port, named https, where a ServiceAccount
// bound to system:monitoring may read /metrics). It waits until every one of them is up: each pod
// behind each Service scraped.
func scraped(ctx context.Context, t *testing.T, env *testenv.Env, dir string) {
	t.Helper()
	kubeconfig, err := env.AdminKubeconfig("victoria-metrics", dir)
	if err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "victoria-metrics.token")
	if err := os.WriteFile(token, []byte(monitoringToken(ctx, t, env)), 0o600); err != nil {
		t.Fatal(err)
	}
	vm, err := testenv.StartVictoriaMetrics(dir, testenv.VictoriaMetricsOptions{ScrapeConfig: fmt.Sprintf(`
global: {scrape_interval: 2s}
scrape_configs:
  - job_name: flotilla
    kubernetes_sd_configs: [{role: endpointslice, kubeconfig_file: %[1]q, namespaces: {names: [%[2]s]}}]
    relabel_configs:
      - {source_labels: [__meta_kubernetes_endpointslice_port_name], regex: metrics, action: keep}
      - {source_labels: [__meta_kubernetes_service_name], target_label: service}
  - job_name: flotilla-apiservers
    scheme: https
    tls_config: {insecure_skip_verify: true}
    bearer_token_file: %[3]q
    kubernetes_sd_configs: [{role: endpointslice, kubeconfig_file: %[1]q, namespaces: {names: [%[2]s]}}]
    relabel_configs:
      - {source_labels: [__meta_kubernetes_endpointslice_port_name], regex: https, action: keep}
      - {source_labels: [__meta_kubernetes_service_name], target_label: service}
`, kubeconfig, platformNamespace, token)})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()

	want := map[string]int{} // Service → its ready endpoints serving metrics
	slices := &discoveryv1.EndpointSliceList{}
	if err := env.Client.List(ctx, slices, client.InNamespace(platformNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		for _, p := range s.Ports {
			if p.Name != nil && (*p.Name == "metrics" || *p.Name == "https") {
				want[s.Labels[discoveryv1.LabelServiceName]] += len(s.Endpoints)
			}
		}
	}
	if len(want) == 0 {
		t.Fatalf("no Service in %s has a port named metrics", platformNamespace)
	}
	var got map[string]int
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		up, err := vmQuery(ctx, vm.URL, `up{job=~"flotilla|flotilla-apiservers"} == 1`)
		if err != nil {
			return false, err
		}
		got = map[string]int{}
		for _, s := range up {
			got[string(s.Metric["service"])]++
		}
		for svc, n := range want {
			if got[svc] < n {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("Flotilla's metrics endpoints not all scraped: %v; up per Service %v, want %v (VictoriaMetrics' log: %s)",
			err, got, want, filepath.Join(dir, "victoria-metrics.log"))
	}
	t.Logf("VictoriaMetrics scrapes every Flotilla metrics endpoint: %v", want)

	// Each process's Go memory limit follows its container's (libs/runtime/memory): the garbage
	// collector, not the kernel's OOM killer, answers a heap near the chart's limit.
	limits, err := vmQuery(ctx, vm.URL, `go_gc_gomemlimit_bytes{job=~"flotilla|flotilla-apiservers"}`)
	if err != nil || len(limits) == 0 {
		t.Fatalf("go_gc_gomemlimit_bytes of Flotilla's processes: %v %v", limits, err)
	}
	for _, s := range limits {
		if s.Value <= 0 || s.Value > 1<<30 {
			t.Errorf("%s: Go memory limit %.0f bytes, not 90 %% of its container's limit", s.Metric, float64(s.Value))
		}
	}
	t.Logf("every Flotilla process has a Go memory limit from its container's (%d series)", len(limits))
}

// monitoringToken is a token of a ServiceAccount that may read metrics endpoints behind
// Kubernetes' authorization (the system:monitoring ClusterRole), as a platform's scraper has.
func monitoringToken(ctx context.Context, t *testing.T, env *testenv.Env) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "victoria-metrics"}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "victoria-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:monitoring"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}}
	for _, o := range []client.Object{sa, crb} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// vmQuery runs an instant PromQL query.
func vmQuery(ctx context.Context, base, query string) (model.Vector, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Data struct {
			Result model.Vector `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %s: %w", query, resp.Status, err)
	}
	return body.Data.Result, nil
}

// quietFailover deletes one pod of every Flotilla workload (the leader, for those that elect one)
// and waits until a replacement runs, every lease a deleted pod held has a new holder, and every
// leader's work queues are empty. Then it reads kube-apiserver's audit log: all the platform's
// ServiceAccounts wrote meanwhile must be their leader election (the Leases and the Events about
// them). A controller that converged before writes nothing when it starts over on the same state.
func quietFailover(ctx context.Context, t *testing.T, k8s client.Client, audit string) {
	t.Helper()
	pods := readyPods(ctx, t, k8s)
	leases := &coordinationv1.LeaseList{}
	if err := k8s.List(ctx, leases, client.InNamespace(platformNamespace)); err != nil {
		t.Fatal(err)
	}
	leaders := map[string]string{} // pod → the Lease it holds
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil {
			pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_") // controller-runtime's <hostname>_<uuid>
			leaders[pod] = l.Name
		}
	}
	victims := map[string]corev1.Pod{} // workload → its pod deleted
	for _, p := range pods {
		w := workload(p)
		if v, ok := victims[w]; !ok || leaders[p.Name] != "" && leaders[v.Name] == "" {
			victims[w] = p
		}
	}
	if len(leaders) == 0 {
		t.Fatalf("no Flotilla controller holds a Lease in %s", platformNamespace)
	}
	deleted := time.Now()
	for _, v := range victims {
		if err := k8s.Delete(ctx, &v); err != nil {
			t.Fatal(err)
		}
	}

	// Back: as many pods Ready as before, none of those deleted; every Lease held by a pod Ready.
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		now := readyPods(ctx, t, k8s)
		if len(now) != len(pods) {
			return false, nil
		}
		ready := map[string]bool{}
		for _, p := range now {
			for _, v := range victims {
				if p.UID == v.UID {
					return false, nil
				}
			}
			ready[p.Name] = true
		}
		if err := k8s.List(ctx, leases, client.InNamespace(platformNamespace)); err != nil {
			return false, err
		}
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity == nil {
				return false, nil
			}
			if pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_"); !ready[pod] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("Flotilla did not come back after its pods were deleted: %v\n%s", err, podStates(ctx, k8s, platformNamespace))
	}
	took := time.Since(deleted)
	idle(ctx, t, k8s, leases.Items)

	events, err := testenv.AuditEvents(audit, deleted)
	if err != nil {
		t.Fatal(err)
	}
	// The deleted pods' processes, as they stop, release their Leases and say so in an Event; one
	// killed while posting it leaves an audit entry without its body (the server never read it),
	// which leaderElection cannot judge. Events from a deleted pod's address are its shutdown's.
	dying := map[string]bool{}
	for _, v := range victims {
		dying[v.Status.PodIP] = v.Status.PodIP != ""
	}
	var writes []string
	for _, e := range events {
		if !strings.HasPrefix(e.User.Username, "system:serviceaccount:"+platformNamespace+":") || leaderElection(e) || e.ObjectRef == nil {
			continue
		}
		if e.ObjectRef.Resource == "events" && slices.ContainsFunc(e.SourceIPs, func(ip string) bool { return dying[ip] }) {
			continue
		}
		r := e.ObjectRef
		switch r.Resource {
		case "tokenreviews", "subjectaccessreviews": // asked, not stored: an aggregated server's delegated authentication
			continue
		}
		what := r.Resource
		if r.Subresource != "" {
			what += "/" + r.Subresource
		}
		w := fmt.Sprintf("%s %s %s/%s by %s", e.Verb, what, r.Namespace, r.Name, strings.TrimPrefix(e.User.Username, "system:serviceaccount:"))
		if e.ResponseStatus != nil && e.ResponseStatus.Code >= 300 {
			w += fmt.Sprintf(" (refused, %d: %s)", e.ResponseStatus.Code, e.ResponseStatus.Message)
		}
		writes = append(writes, w)
	}
	sort.Strings(writes)
	if len(writes) > 0 {
		t.Errorf("after its pods were deleted, Flotilla wrote (or tried to) beyond its leader election (%d writes):\n  %s", len(writes), strings.Join(writes, "\n  "))
	}
	t.Logf("%d Flotilla pods deleted (%d of them leaders): back and leading in %.1f s, then idle with no write beyond leader election",
		len(victims), len(leaders), took.Seconds())
}

// leaderElection says whether an audited write is leader election's: a Lease, or an Event about one.
func leaderElection(e auditv1.Event) bool {
	if e.ObjectRef != nil && e.ObjectRef.Resource == "leases" {
		return true
	}
	if e.ObjectRef == nil || e.ObjectRef.Resource != "events" || e.RequestObject == nil {
		return false
	}
	var ev struct {
		InvolvedObject struct{ Kind string } `json:"involvedObject"` // core/v1
		Regarding      struct{ Kind string } `json:"regarding"`      // events.k8s.io/v1
	}
	_ = json.Unmarshal(e.RequestObject.Raw, &ev)
	return ev.InvolvedObject.Kind == "Lease" || ev.Regarding.Kind == "Lease"
}

// readyPods lists the platform's pods that are Ready and not being deleted.
func readyPods(ctx context.Context, t *testing.T, k8s client.Client) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := k8s.List(ctx, list, client.InNamespace(platformNamespace)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// workload names what owns a pod (its ReplicaSet or DaemonSet).
func workload(p corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return o.Kind + "/" + o.Name
		}
	}
	return "Pod/" + p.Name
}

// idle waits until every leader's controllers have nothing left to do: their work queues empty
// and their reconcile counts unchanged over two reads of their metrics a few seconds apart. A
// controller still retrying an object that cannot converge here (a LINSTOR that is not there)
// never idles; after two minutes the audit log is read all the same.
func idle(ctx context.Context, t *testing.T, k8s client.Client, leases []coordinationv1.Lease) {
	t.Helper()
	var endpoints []string
	for _, l := range leases {
		pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		p := &corev1.Pod{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: platformNamespace, Name: pod}, p); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.Name == "metrics" {
					endpoints = append(endpoints, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))+"/metrics")
				}
			}
		}
	}
	last := ""
	busy := wait.PollUntilContextTimeout(ctx, 3*time.Second, 2*time.Minute, false, func(ctx context.Context) (bool, error) {
		var state strings.Builder
		for _, e := range endpoints {
			s, err := workState(ctx, e)
			if err != nil {
				return false, nil // not serving yet
			}
			if strings.Contains(s, "queued") {
				last = ""
				return false, nil
			}
			state.WriteString(s)
		}
		now := state.String()
		settled := now == last
		last = now
		return settled, nil
	})
	if busy != nil {
		t.Logf("some controller is still busy two minutes after taking over (%v): reading the audit log all the same", busy)
	}
}

// workState is what a controller's metrics say of its work: each controller's reconciles so far,
// and "queued" when any work queue holds an item.
func workState(ctx context.Context, endpoint string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range families["workqueue_depth"].GetMetric() {
		if m.GetGauge().GetValue() > 0 {
			return "queued", nil
		}
	}
	for _, m := range families["controller_runtime_reconcile_total"].GetMetric() {
		fmt.Fprintf(&b, "%s %v=%v;", endpoint, m.GetLabel(), m.GetCounter().GetValue())
	}
	return b.String(), nil
}
