package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
)

// The tenant tree of every test: root → acme → dev, and root → beta; made once.
var tree = sync.OnceValue(func() error {
	ctx := context.Background()
	var last *tenancyv1.Tenant
	var lastErr error
	for _, tn := range []*tenancyv1.Tenant{
		{ObjectMeta: metav1.ObjectMeta{Name: tenancyv1.RootName, Namespace: tenancyv1.RootNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: tenancyv1.RootNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: "beta", Namespace: tenancyv1.RootNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: "dev", Namespace: "tenant-acme"}},
	} {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if lastErr = kube.Create(ctx, tn.DeepCopy()); lastErr != nil && !apierrors.IsAlreadyExists(lastErr) {
				return false, nil // the parent's namespace may not exist yet
			}
			last = &tenancyv1.Tenant{}
			if err := kube.Get(ctx, client.ObjectKeyFromObject(tn), last); err != nil {
				return false, nil
			}
			return apimeta.IsStatusConditionTrue(last.Status.Conditions, "Ready"), nil
		}); err != nil {
			return fmt.Errorf("tenant %s not Ready: %w (create: %v, status %+v)", tn.Name, err, lastErr, last.Status)
		}
	}
	// Each namespace runs two pods for the first hour of the history: one of the app
	// Postgres/db (release postgres-db) at 0.5 cores and 1 GiB, and one of no app at 0.25 cores.
	var b strings.Builder
	for _, ns := range []string{"tenant-root", "tenant-acme", "tenant-acme-dev", "tenant-beta"} {
		for k := range 60 {
			at := t0.Add(time.Duration(k)*time.Minute + 17*time.Second).UnixMilli()
			for _, p := range []struct {
				pod, instance string
				cpu, mem      float64
			}{{"db-0", "postgres-db", 0.5, 1 << 30}, {"debug", "", 0.25, 0}, {"orphan-0", "orphan", 0.125, 0}, {"late-0", "late", 0.125, 0}} {
				if ns != "tenant-beta" && p.pod != "db-0" && p.pod != "debug" {
					continue // beta alone runs releases of no app (yet): TestAppsAreOnlyThePlatformsHelmReleases
				}
				fmt.Fprintf(&b, "kube_pod_resource_request{job=\"kube-scheduler\",namespace=%q,pod=%q,node=\"node-1\",resource=\"cpu\",unit=\"cores\"} %g %d\n", ns, p.pod, p.cpu, at)
				fmt.Fprintf(&b, "kube_pod_resource_request{job=\"kube-scheduler\",namespace=%q,pod=%q,node=\"node-1\",resource=\"memory\",unit=\"bytes\"} %g %d\n", ns, p.pod, p.mem, at)
				fmt.Fprintf(&b, "kube_pod_labels{job=\"kube-state-metrics\",namespace=%q,pod=%q,label_app_kubernetes_io_instance=%q} 1 %d\n", ns, p.pod, p.instance, at)
			}
		}
	}
	// The scheduler is scraped throughout: the pods ended after an hour.
	for k := range 120 {
		fmt.Fprintf(&b, "up{job=\"kube-scheduler\",instance=\"sched\"} 1 %d\n", t0.Add(time.Duration(k)*time.Minute+17*time.Second).UnixMilli())
	}
	for _, ns := range []string{"tenant-root", "tenant-acme", "tenant-acme-dev", "tenant-beta"} {
		// The app, as the apps API stores it: a HelmRelease in the tenant's delivery namespace
		// installing release postgres-db into the tenant's namespace.
		hr := &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Name: "postgres-db", Namespace: tenancyv1.DeliveryNamespace(ns),
				Labels: map[string]string{meta.LabelAppKind: "Postgres", meta.LabelAppName: "db"}},
			Spec: helmv2.HelmReleaseSpec{
				ReleaseName: "postgres-db", TargetNamespace: ns, Interval: metav1.Duration{Duration: time.Hour},
				Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{Chart: "postgres",
					SourceRef: helmv2.CrossNamespaceObjectReference{Kind: "HelmRepository", Name: "catalog"}}},
			},
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := kube.Create(ctx, hr.DeepCopy())
			return err == nil || apierrors.IsAlreadyExists(err), nil // the delivery namespace comes with the tenant
		}); err != nil {
			return fmt.Errorf("HelmRelease in %s: %w", hr.Namespace, err)
		}
	}
	return vm.Import(b.String())
})

// viewer is a user with the view role on a tenant, through the group the tenant-controller binds.
func viewer(t *testing.T, namespace string) client.Client {
	t.Helper()
	if err := tree(); err != nil {
		t.Fatal(err)
	}
	c, err := env.As("user-of-"+namespace, namespace+"-view")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newReport(namespace string, start, end time.Time) *usagev1.UsageReport {
	return &usagev1.UsageReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
		Spec:       usagev1.UsageReportSpec{StartTimestamp: metav1.NewTime(start), EndTimestamp: metav1.NewTime(end)},
	}
}

// create creates the report as c, retrying while the tenant's roles are being aggregated and
// bound (a new tenant's RoleBindings come shortly after it is Ready).
func create(t *testing.T, c client.Client, r *usagev1.UsageReport) error {
	t.Helper()
	var err error
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		attempt := r.DeepCopy()
		if err = c.Create(ctx, attempt); err == nil {
			attempt.DeepCopyInto(r)
		}
		return !apierrors.IsForbidden(err), nil
	})
	return err
}

func TestTenantReportHoldsItsSubtreeAndApps(t *testing.T) {
	c := viewer(t, "tenant-acme")
	r := newReport("tenant-acme", t0, t0.Add(2*time.Hour))
	if err := create(t, c, r); err != nil {
		t.Fatal(err)
	}
	if r.Spec.Tenant != "acme" {
		t.Errorf("spec.tenant = %q, want acme", r.Spec.Tenant)
	}
	var got []string
	for _, c := range r.Report.Consumers {
		got = append(got, fmt.Sprintf("%s %s/%s/%s cpu=%s mem=%s", c.Tenant, c.Namespace, c.Workload.Kind, c.Workload.Name,
			c.Consumptions.VCPUHours, c.Consumptions.MemoryGiBHours))
	}
	// An hour of 0.5 cores and 1 GiB, an hour of 0.25 cores: the tenant first, then its child.
	want := []string{
		"acme tenant-acme//unattributed cpu=0.25 mem=0",
		"acme tenant-acme/Postgres/db cpu=0.5 mem=1",
		"dev tenant-acme-dev//unattributed cpu=0.25 mem=0",
		"dev tenant-acme-dev/Postgres/db cpu=0.5 mem=1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("consumers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Report.Total.VCPUHours != "1.5" || r.Report.Total.MemoryGiBHours != "2" {
		t.Errorf("total = %+v, want 1.5 vCPU-hours and 2 GiB-hours", r.Report.Total)
	}

	// One workload, as a time series of 30-minute intervals.
	r = newReport("tenant-acme", t0, t0.Add(2*time.Hour))
	r.Spec.Workload = &usagev1.WorkloadReference{Kind: "Postgres", Name: "db"}
	r.Spec.Step = &metav1.Duration{Duration: 30 * time.Minute}
	if err := create(t, c, r); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, c := range r.Report.Consumers {
		got = append(got, fmt.Sprintf("%s %s %s-%s cpu=%s", c.Namespace, c.Workload.Name,
			c.StartTimestamp.Sub(t0), c.EndTimestamp.Sub(t0), c.Consumptions.VCPUHours))
	}
	want = []string{
		"tenant-acme db 0s-30m0s cpu=0.25", "tenant-acme db 30m0s-1h0m0s cpu=0.25",
		"tenant-acme-dev db 0s-30m0s cpu=0.25", "tenant-acme-dev db 30m0s-1h0m0s cpu=0.25",
	}
	if !slices.Equal(got, want) {
		t.Errorf("time series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTenantCannotReportOnOthers(t *testing.T) {
	c := viewer(t, "tenant-acme")
	// Make sure acme's own report works first, so a refusal below is the boundary's.
	if err := create(t, c, newReport("tenant-acme", t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"tenant-beta", "tenant-root", "default"} {
		err := c.Create(context.Background(), newReport(ns, t0, t0.Add(time.Hour)))
		if !apierrors.IsForbidden(err) {
			t.Errorf("acme's viewer reporting on %s: %v, want Forbidden", ns, err)
		}
	}
	// A descendant's user does not see its parent.
	dev := viewer(t, "tenant-acme-dev")
	r := newReport("tenant-acme-dev", t0, t0.Add(time.Hour))
	if err := create(t, dev, r); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Report.Consumers {
		if c.Namespace != "tenant-acme-dev" {
			t.Errorf("dev's report holds %s", c.Namespace)
		}
	}
	if err := dev.Create(context.Background(), newReport("tenant-acme", t0, t0.Add(time.Hour))); !apierrors.IsForbidden(err) {
		t.Errorf("dev's viewer reporting on acme: %v, want Forbidden", err)
	}
}

func TestInvalidReportsNameTheField(t *testing.T) {
	c := viewer(t, "tenant-acme")
	now := time.Now()
	step := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	for _, tc := range []struct {
		name  string
		edit  func(*usagev1.UsageReport)
		field string
	}{
		{"no start", func(r *usagev1.UsageReport) { r.Spec.StartTimestamp = metav1.Time{} }, "spec.startTimestamp"},
		{"end before start", func(r *usagev1.UsageReport) { r.Spec.EndTimestamp = metav1.NewTime(t0.Add(-time.Hour)) }, "spec.endTimestamp"},
		{"end in the future", func(r *usagev1.UsageReport) { r.Spec.EndTimestamp = metav1.NewTime(now.Add(time.Hour)) }, "spec.endTimestamp"},
		{"older than the retention", func(r *usagev1.UsageReport) { r.Spec.StartTimestamp = metav1.NewTime(now.Add(-48 * time.Hour)) }, "spec.startTimestamp"},
		{"step off the resolution", func(r *usagev1.UsageReport) { r.Spec.Step = step(90 * time.Second) }, "spec.step"},
		{"step not dividing the period", func(r *usagev1.UsageReport) { r.Spec.Step = step(7 * time.Minute) }, "spec.step"},
		{"over 10,000 points", func(r *usagev1.UsageReport) {
			r.Spec.StartTimestamp = metav1.NewTime(now.Add(-23 * time.Hour).Truncate(time.Hour))
			r.Spec.EndTimestamp = metav1.NewTime(r.Spec.StartTimestamp.Add(20000 * time.Second))
			r.Spec.Step = step(time.Second)
		}, "spec.step"},
		{"another tenant", func(r *usagev1.UsageReport) { r.Spec.Tenant = "beta" }, "spec.tenant"},
		{"a workload without a kind", func(r *usagev1.UsageReport) { r.Spec.Workload = &usagev1.WorkloadReference{Name: "db"} }, "spec.workload.kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReport("tenant-acme", t0, t0.Add(time.Hour))
			tc.edit(r)
			err := create(t, c, r)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want Invalid (422)", err)
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Details == nil {
				t.Fatalf("no details in %v", err)
			}
			var fields []string
			for _, cause := range status.Status().Details.Causes {
				fields = append(fields, cause.Field)
			}
			if !slices.Contains(fields, tc.field) {
				t.Errorf("causes name %v, want %s: %v", fields, tc.field, err)
			}
		})
	}
	// Not a tenant's namespace: refused even for the platform's admin.
	err := kube.Create(context.Background(), newReport("default", t0, t0.Add(time.Hour)))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.namespace") {
		t.Errorf("a report in default: %v, want Invalid naming metadata.namespace", err)
	}
}

func TestMetricsStoreDownIsUnavailable(t *testing.T) {
	c := viewer(t, "tenant-acme")
	if err := create(t, c, newReport("tenant-acme", t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	vm.Stop()
	err := c.Create(context.Background(), newReport("tenant-acme", t0, t0.Add(time.Hour)))
	if restartErr := vm.Restart(); restartErr != nil {
		t.Fatal(restartErr)
	}
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "metrics store") {
		t.Errorf("with VictoriaMetrics down: %v, want 503 naming the metrics store", err)
	}
	if err := create(t, c, newReport("tenant-acme", t0, t0.Add(time.Hour))); err != nil {
		t.Errorf("after VictoriaMetrics is back: %v", err)
	}
}

// TestKubectlCreateAsATenant is the README's command, run by a tenant user with a fresh cache and
// no flags. kubectl's validation of a kind without PATCH (create-only, like SelfSubjectAccessReview)
// asks whether it is a CRD by listing CRDs: the chart lets every user read them, so kubectl then
// validates the report against the server's OpenAPI, and a misspelt field is refused.
func TestKubectlCreateAsATenant(t *testing.T) {
	viewer(t, "tenant-acme")
	dir := t.TempDir()
	kubeconfig, err := env.AdminKubeconfig("kubectl", dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf("apiVersion: usage.flotilla.dev/v1alpha1\nkind: UsageReport\nmetadata:\n  namespace: tenant-acme\n"+
		"spec:\n  startTimestamp: %q\n  endTimestamp: %q\n", t0.Format(time.RFC3339), t0.Add(2*time.Hour).Format(time.RFC3339))
	file := filepath.Join(dir, "usagereport.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	// Retried while the tenant's roles are being aggregated and bound.
	var out []byte
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		out, err = exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig, "--cache-dir", t.TempDir(),
			"--as", "user-of-tenant-acme", "--as-group", "tenant-acme-view", "create", "-f", file, "-o", "yaml").CombinedOutput()
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("kubectl create: %v: %s", err, out)
	}
	var r usagev1.UsageReport
	if err := yaml.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if r.Report.Total.VCPUHours != "1.5" {
		t.Errorf("kubectl's report:\n%s", out)
	}

	// A misspelt field is an error, not silently dropped.
	typo := strings.Replace(manifest, "endTimestamp", "endTimestmp", 1)
	if err := os.WriteFile(file, []byte(typo), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig, "--cache-dir", t.TempDir(),
		"--as", "user-of-tenant-acme", "--as-group", "tenant-acme-view", "create", "-f", file).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "endTimestmp") {
		t.Errorf("kubectl create with a misspelt field: %v: %s", err, out)
	}
}

// TestAppsAreOnlyThePlatformsHelmReleases: a HelmRelease names an app only where the apps API
// stores it, in its target's delivery namespace. One anywhere else (a tenant able to write
// HelmReleases in its own namespace, say) must not rename another tenant's workloads in a report.
func TestAppsAreOnlyThePlatformsHelmReleases(t *testing.T) {
	root := viewer(t, "tenant-root")
	ctx := context.Background()
	release := func(namespace, name, kind, target string) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{meta.LabelAppKind: kind, meta.LabelAppName: name}},
			Spec: helmv2.HelmReleaseSpec{
				ReleaseName: name, TargetNamespace: target, Interval: metav1.Duration{Duration: time.Hour},
				Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{Chart: "x",
					SourceRef: helmv2.CrossNamespaceObjectReference{Kind: "HelmRepository", Name: "catalog"}}},
			},
		}
	}
	// First the impostor, in acme's namespace, claiming beta's release "orphan"; then an app of
	// beta's stored as the apps API stores it: once the report shows the second, the usage-api
	// has seen the first.
	for _, hr := range []*helmv2.HelmRelease{
		release("tenant-acme", "orphan", "Spoofed", "tenant-beta"),
		release(tenancyv1.DeliveryNamespace("tenant-beta"), "late", "Redis", "tenant-beta"),
	} {
		if err := kube.Create(ctx, hr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.Delete(ctx, hr) })
	}
	var r *usagev1.UsageReport
	eventually := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		r = newReport("tenant-root", t0, t0.Add(2*time.Hour))
		if err := create(t, root, r); err != nil {
			return false, err
		}
		return slices.ContainsFunc(r.Report.Consumers, func(c usagev1.Consumer) bool { return c.Workload.Kind == "Redis" }), nil
	})
	if eventually != nil {
		t.Fatalf("beta's app late never in root's report: %v", eventually)
	}
	for _, c := range r.Report.Consumers {
		if c.Workload.Kind == "Spoofed" {
			t.Errorf("a HelmRelease outside the delivery namespace named %s's workload: %+v", c.Namespace, c)
		}
	}
}
