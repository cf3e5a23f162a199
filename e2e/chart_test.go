package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// Every chart lints, renders with its defaults and with its optional features, and what it renders
// is accepted by a real API server (server-side dry run).
// chartRenders holds each service's chart rendered with its defaults into flotilla-system (renderChart).
var chartRenders sync.Map

// renderChart is a copy of what `helm template` renders of the service's chart with its defaults,
// in flotilla-system; each chart is rendered once per test binary.
func renderChart(t testing.TB, svc string) []*unstructured.Unstructured {
	t.Helper()
	objs, ok := chartRenders.Load(svc)
	if !ok {
		objs, _ = chartRenders.LoadOrStore(svc, decodeAll(t, run(t, "helm", "template", svc, filepath.Join(repo, "deploy", "charts", svc), "--namespace", "flotilla-system")))
	}
	var out []*unstructured.Unstructured
	for _, o := range objs.([]*unstructured.Unstructured) {
		out = append(out, o.DeepCopy())
	}
	return out
}

func TestCharts(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	for _, svc := range services(t) {
		chart := filepath.Join(repo, "deploy", "charts", svc)
		t.Run(svc, func(t *testing.T) {
			run(t, "helm", "lint", "--strict", chart)
			// values.schema.json refuses what the chart does not know: a misspelt value is an error.
			if out, err := exec.Command(tool(t, "helm"), "template", svc, chart, "--set", "replica=3").CombinedOutput(); err == nil || !strings.Contains(string(out), "replica") {
				t.Errorf("an unknown value was accepted (values.schema.json): %v\n%s", err, out)
			}
			run(t, "helm", append([]string{"template", svc, chart}, optionalFeatures(t, chart)...)...)
			objs := renderChart(t, svc)

			kinds := map[string]*unstructured.Unstructured{}
			for _, o := range objs {
				kinds[o.GetKind()] = o
			}
			for _, k := range []string{"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "Service", "PodDisruptionBudget"} {
				if kinds[k] == nil {
					t.Errorf("chart renders no %s", k)
				}
			}
			// The release is named after the service, and so is its main Deployment: a
			// controller's, electing a leader (in a Role's leases), or an aggregated API server's.
			main := false
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					main = main || o.GetName() == svc
					if checkDeployment(t, o, o.GetName() == svc) && kinds["Role"] == nil {
						t.Errorf("deployment %s elects a leader, and the chart renders no Role for its leases", o.GetName())
					}
				}
			}
			if !main {
				t.Errorf("chart renders no Deployment %s", svc)
			}
			checkGeneratedRBAC(t, chart, objs)

			ns := &unstructured.Unstructured{}
			ns.SetAPIVersion("v1")
			ns.SetKind("Namespace")
			ns.SetName("flotilla-system")
			if err := client.IgnoreAlreadyExists(env.Client.Create(ctx, ns)); err != nil {
				t.Fatal(err)
			}
			// A namespace the chart makes holds others of its objects: a dry run would not make it.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("chart-test")); err != nil {
						t.Errorf("API server rejects Namespace %s: %v", o.GetName(), err)
					}
				}
			}
			for _, o := range objs {
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("chart-test"), client.DryRunAll); err != nil {
					t.Errorf("API server rejects %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

// optionalFeatures are the --set flags turning on every optional feature the chart has: its
// ServiceMonitor, and cert-manager for each serving certificate.
func optionalFeatures(t *testing.T, chart string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--set", "metrics.serviceMonitor.enabled=true"}
	if _, ok, _ := unstructured.NestedMap(values, "metrics", "dashboard"); ok {
		flags = append(flags, "--set", "metrics.dashboard.enabled=true")
	}
	for _, server := range []string{"webhook", "apiserver"} {
		if _, ok, _ := unstructured.NestedMap(values, server, "certManager"); ok {
			flags = append(flags, "--set", server+".certManager.enabled=true", "--set-json", server+`.certManager.issuerRef={"name":"ca"}`)
		}
	}
	return flags
}

// checkDeployment checks one of the chart's Deployments and tells whether it elects a leader. The
// main one, named after the release, is a controller electing a leader unless it is an aggregated
// API server (it serves on --secure-port); those run every replica active.
func checkDeployment(t *testing.T, d *unstructured.Unstructured, main bool) (leader bool) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("deployment %s: want one container, got %d", d.GetName(), len(containers))
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	apiserver := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--secure-port=") })
	leader = slices.Contains(args, "--leader-elect")
	if main && !apiserver && !leader {
		t.Errorf("deployment %s does not elect a leader: %v", d.GetName(), args)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if _, ok := c[probe]; !ok {
			t.Errorf("deployment %s has no %s", d.GetName(), probe)
		}
	}
	// Hardened as operators expect: non-root, read-only root, no privilege escalation, no
	// capabilities, the runtime's seccomp profile, requests and a memory limit, replicas spread.
	for path, want := range map[string]any{
		"spec.template.spec.securityContext.runAsNonRoot":        true,
		"spec.template.spec.securityContext.seccompProfile.type": "RuntimeDefault",
		"securityContext.readOnlyRootFilesystem":                 true,
		"securityContext.allowPrivilegeEscalation":               false,
		"resources.limits.memory":                                nil,
		"resources.requests.cpu":                                 nil,
		"spec.template.spec.affinity.podAntiAffinity":            nil,
	} {
		obj := d.Object
		if !strings.HasPrefix(path, "spec.") {
			obj = c
		}
		got, found, _ := unstructured.NestedFieldNoCopy(obj, strings.Split(path, ".")...)
		if !found || (want != nil && got != want) {
			t.Errorf("deployment %s: %s is %v, want %v", d.GetName(), path, got, want)
		}
	}
	if drop, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); !slices.Contains(drop, "ALL") {
		t.Errorf("deployment %s keeps capabilities: drop %v", d.GetName(), drop)
	}
	return leader
}

// Each ClusterRole generated from RBAC markers (files/role.yaml for the controller,
// files/<component>/role.yaml for other binaries) is rendered, under its generated name, with
// exactly the generated rules.
func checkGeneratedRBAC(t *testing.T, chart string, objs []*unstructured.Unstructured) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chart, "files", "*role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	others, err := filepath.Glob(filepath.Join(chart, "files", "*", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if files = append(files, others...); len(files) == 0 {
		t.Errorf("no RBAC generated from markers in %s/files", chart)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		generated := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &generated.Object); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "ClusterRole" && o.GetName() == generated.GetName()
		})
		if i < 0 {
			t.Errorf("no ClusterRole %s rendered (%s)", generated.GetName(), f)
		} else if !equality.Semantic.DeepEqual(objs[i].Object["rules"], generated.Object["rules"]) {
			t.Errorf("chart ClusterRole %s rules differ from %s", generated.GetName(), f)
		}
	}
}

// The Grafana dashboard the tenant-controller chart ships is valid JSON, and every metric its
// queries name is one a Flotilla service or controller-runtime exports: a renamed metric must not
// leave an empty panel behind.
func TestDashboard(t *testing.T) {
	chart := filepath.Join(repo, "deploy", "charts", "tenant-controller")
	var board struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	found := false
	for _, o := range decodeAll(t, run(t, "helm", "template", "tenant-controller", chart, "--set", "metrics.dashboard.enabled=true")) {
		if o.GetKind() != "ConfigMap" || o.GetLabels()["grafana_dashboard"] != "1" {
			continue
		}
		found = true
		raw, _, _ := unstructured.NestedString(o.Object, "data", "flotilla-controllers.json")
		if err := json.Unmarshal([]byte(raw), &board); err != nil {
			t.Fatalf("dashboard is not JSON: %v", err)
		}
	}
	if !found || len(board.Panels) == 0 {
		t.Fatal("no dashboard ConfigMap with panels rendered")
	}
	// Flotilla's metrics, as the services define them (prometheus.Opts or a literal name).
	known := map[string]bool{"flotilla_objects": true, "flotilla_objects_stale": true}
	opts := regexp.MustCompile(`Namespace: *"(\w+)", *Subsystem: *"(\w+)", *Name: *"(\w+)"`)
	literal := regexp.MustCompile(`"(flotilla_\w+)"`)
	err := filepath.WalkDir(filepath.Join(repo, "services"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range opts.FindAllStringSubmatch(string(src), -1) {
			known[m[1]+"_"+m[2]+"_"+m[3]] = true
		}
		for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
			known[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	runtimeMetrics := regexp.MustCompile(`^(controller_runtime_|workqueue_|rest_client_)`)
	name := regexp.MustCompile(`\b([a-z_]+)(\{|\[)`)
	for _, p := range board.Panels {
		for _, target := range p.Targets {
			for _, m := range name.FindAllStringSubmatch(target.Expr, -1) {
				metric := strings.TrimSuffix(m[1], "_bucket")
				if !known[metric] && !runtimeMetrics.MatchString(metric) {
					t.Errorf("panel %q queries %s, which no service exports", p.Title, metric)
				}
			}
		}
	}
}

// The add-on charts the cluster-controller installs in every customer cluster (deploy/addons),
// rendered with the values it passes (cluster.AddonValues): lint-clean, accepted by a real API
// server, every container with requests, a memory limit and an image pinned to a release, the
// node-level privileges each needs and no other, and no Secret: nothing delivered into a
// customer's cluster holds a credential.
func TestAddonCharts(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	values := `cluster={"name":"prod","infraNamespace":"tenant-acme","podCIDR":"10.244.0.0/16","serviceCIDR":"10.96.0.0/12",` +
		`"infraLabels":{"cluster.x-k8s.io/cluster-name":"prod","cluster.flotilla.dev/cluster-uid":"1234"}}`
	// What each add-on may do on its node, by container: nothing else may be privileged, add
	// capabilities or use the host's network.
	privileged := map[string]bool{"csi-driver": true}
	capabilities := map[string][]any{"flannel": {"NET_ADMIN", "NET_RAW"}}
	hostNetwork := map[string]bool{"flannel": true}
	charts, err := filepath.Glob(filepath.Join(repo, "deploy", "addons", "*"))
	if err != nil || len(charts) == 0 {
		t.Fatalf("no add-on charts: %v", err)
	}
	for _, chart := range charts {
		name := filepath.Base(chart)
		t.Run(name, func(t *testing.T) {
			run(t, "helm", "lint", "--strict", chart, "--set-json", values)
			if out, err := exec.Command(tool(t, "helm"), "template", name, chart).CombinedOutput(); err == nil || !strings.Contains(string(out), "set by the cluster-controller") {
				t.Errorf("rendered without the cluster's values: %v\n%s", err, out)
			}
			ns := "flotilla-" + name // where the cluster-controller installs it
			objs := decodeAll(t, run(t, "helm", "template", name, chart, "--namespace", ns, "--set-json", values))
			nsObj := &unstructured.Unstructured{}
			nsObj.SetAPIVersion("v1")
			nsObj.SetKind("Namespace")
			nsObj.SetName(ns)
			if err := client.IgnoreAlreadyExists(env.Client.Create(ctx, nsObj)); err != nil {
				t.Fatal(err)
			}
			workloads := 0
			for _, o := range objs {
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("chart-test"), client.DryRunAll); err != nil {
					t.Errorf("API server rejects %s %s: %v", o.GetKind(), o.GetName(), err)
				}
				if o.GetKind() == "Secret" {
					t.Errorf("the add-on delivers Secret %s into the customer's cluster", o.GetName())
				}
				pod, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
				if !ok {
					continue
				}
				workloads++
				if pod["hostNetwork"] == true && !hostNetwork[o.GetName()] {
					t.Errorf("%s %s uses the host's network", o.GetKind(), o.GetName())
				}
				containers, _, _ := unstructured.NestedSlice(pod, "containers")
				inits, _, _ := unstructured.NestedSlice(pod, "initContainers")
				for _, c := range append(containers, inits...) {
					c := c.(map[string]any)
					cname, _ := c["name"].(string)
					image, _ := c["image"].(string)
					if tag := image[strings.LastIndex(image, ":")+1:]; !strings.Contains(image, ":") || tag == "latest" {
						t.Errorf("container %s: image %q is not pinned to a release", cname, image)
					}
					if p, _, _ := unstructured.NestedBool(c, "securityContext", "privileged"); p != privileged[cname] {
						t.Errorf("container %s: privileged %v", cname, p)
					}
					added, _, _ := unstructured.NestedSlice(c, "securityContext", "capabilities", "add")
					if len(added) > 0 && fmt.Sprint(added) != fmt.Sprint(capabilities[cname]) {
						t.Errorf("container %s adds capabilities %v", cname, added)
					}
					if _, ok, _ := unstructured.NestedFieldNoCopy(c, "resources", "requests"); !ok {
						t.Errorf("container %s requests nothing", cname)
					}
					if _, ok, _ := unstructured.NestedFieldNoCopy(c, "resources", "limits", "memory"); !ok {
						t.Errorf("container %s has no memory limit", cname)
					}
				}
			}
			if workloads == 0 {
				t.Error("the add-on runs nothing")
			}
		})
	}
}

// What tenants may do is in one file per chart, templates/tenant-roles.yaml, plain YAML that
// `make demo` and the tests apply as it is: every ClusterRole a chart aggregates into the tenant
// roles, and every grant to all signed-in users (tenants' users among them: the catalog, the
// storage classes), is in that file, and rendered unchanged. A chart granting tenants something elsewhere would
// make the demo's tenants differ from a platform's.
func TestTenantRolesInOneFile(t *testing.T) {
	for _, svc := range services(t) {
		chart := filepath.Join(repo, "deploy", "charts", svc)
		file := map[string]*unstructured.Unstructured{}
		if raw, err := os.ReadFile(filepath.Join(chart, "templates", "tenant-roles.yaml")); err == nil {
			if strings.Contains(string(raw), "{{") {
				t.Errorf("%s: tenant-roles.yaml holds template directives: it must apply as it is", svc)
			}
			for _, o := range decodeAll(t, raw) {
				file[o.GetKind()+"/"+o.GetName()] = o
			}
		}
		rendered := renderChart(t, svc)
		// What every signed-in user is granted (a tenant's users among them), and its roles.
		everyone := map[string]bool{}
		for _, o := range rendered {
			var b rbacv1.ClusterRoleBinding
			if o.GetKind() != "ClusterRoleBinding" || runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b) != nil {
				continue
			}
			if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.GroupKind && (s.Name == "system:authenticated" || s.Name == "system:unauthenticated")
			}) {
				everyone["ClusterRoleBinding/"+b.Name], everyone["ClusterRole/"+b.RoleRef.Name] = true, true
			}
		}
		for _, o := range rendered {
			tenant := everyone[o.GetKind()+"/"+o.GetName()]
			for label := range o.GetLabels() {
				tenant = tenant || strings.HasPrefix(label, "flotilla.dev/aggregate-to-tenant-")
			}
			if !tenant {
				continue
			}
			if f := file[o.GetKind()+"/"+o.GetName()]; f == nil || !equality.Semantic.DeepEqual(f.Object, o.Object) {
				t.Errorf("%s: %s %s grants tenants rights but is not rendered as templates/tenant-roles.yaml has it", svc, o.GetKind(), o.GetName())
			}
		}
	}
}

// Every right a chart grants at cluster scope (a ClusterRoleBinding's rules, as rendered) has a
// row in docs/operations.md's table of cluster-wide rights, with the reason it is needed, and the
// table holds nothing no chart grants. A new right fails here until someone writes down why.
func TestClusterWideRightsTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- cluster-wide rights: begin -->")
	table, _, ok2 := strings.Cut(table, "<!-- cluster-wide rights: end -->")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no table of cluster-wide rights between its markers")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 || strings.TrimSpace(cells[0]) == "chart" || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		if cells[4] == "" {
			t.Errorf("docs/operations.md: %s's right %s on %s has no reason", cells[1], cells[3], cells[2])
		}
		documented[strings.Join(cells[:4], " | ")] = true
	}
	var rows []string
	ruleRows := func(svc string, who []string, role *rbacv1.ClusterRole, where string) {
		for _, rule := range role.Rules {
			var what []string
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					what = append(what, strings.TrimPrefix(g+"/"+r, "/"))
				}
			}
			what = append(what, rule.NonResourceURLs...)
			if len(rule.ResourceNames) > 0 {
				what = append(what, "named "+strings.Join(rule.ResourceNames, ", "))
			}
			verbs := slices.Clone(rule.Verbs)
			slices.Sort(verbs)
			rows = append(rows, strings.Join([]string{svc, strings.Join(who, ", "), strings.Join(what, ", ") + where, strings.Join(verbs, ", ")}, " | "))
		}
	}
	roles := map[string]*rbacv1.ClusterRole{}
	roleChart := map[string]string{}
	for _, svc := range services(t) {
		for _, o := range renderChart(t, svc) {
			if o.GetKind() == "ClusterRole" {
				var r rbacv1.ClusterRole
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
					t.Fatal(err)
				}
				roles[r.Name], roleChart[r.Name] = &r, svc
			}
		}
	}
	for _, svc := range services(t) {
		for _, o := range renderChart(t, svc) {
			var b rbacv1.ClusterRoleBinding
			if o.GetKind() != "ClusterRoleBinding" {
				continue
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			var who []string
			for _, s := range b.Subjects {
				who = append(who, s.Name)
			}
			role := roles[b.RoleRef.Name]
			if role == nil || roleChart[b.RoleRef.Name] != svc { // a role the chart does not define: Kubernetes' own
				rows = append(rows, strings.Join([]string{svc, strings.Join(who, ", "), "ClusterRole " + b.RoleRef.Name, "all it holds"}, " | "))
				continue
			}
			if role.AggregationRule != nil { // rights others grant it, by label
				for _, sel := range role.AggregationRule.ClusterRoleSelectors {
					rows = append(rows, strings.Join([]string{svc, strings.Join(who, ", "), "ClusterRoles labelled " + metav1.FormatLabelSelector(&sel), "what they hold"}, " | "))
				}
			}
			ruleRows(svc, who, role, "")
		}
	}
	// The tenant-controller's namespace grants: a chart's ClusterRole bound in every tenant
	// namespace (its Deployment's --namespace-grants, as rendered).
	for _, o := range renderChart(t, "tenant-controller") {
		if o.GetKind() != "Deployment" {
			continue
		}
		args, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range args {
			for _, a := range c.(map[string]any)["args"].([]any) {
				v, ok := strings.CutPrefix(a.(string), "--namespace-grants=")
				if !ok {
					continue
				}
				for g := range strings.SplitSeq(v, ",") {
					name, sa, _ := strings.Cut(g, "=")
					if name == "" {
						continue
					}
					role := roles[name]
					if role == nil {
						t.Errorf("the tenant-controller's namespaceGrants names ClusterRole %s, which no chart defines", name)
						continue
					}
					_, who, _ := strings.Cut(sa, "/")
					ruleRows(roleChart[name], []string{who}, role, " (in every tenant namespace)")
				}
			}
		}
	}
	granted := map[string]bool{}
	for _, row := range rows {
		granted[row] = true
		if !documented[row] {
			t.Errorf("docs/operations.md does not list, with its reason, the cluster-wide right | %s |", row)
		}
	}
	for row := range documented {
		if !granted[row] {
			t.Errorf("docs/operations.md lists a cluster-wide right no chart grants: | %s |", row)
		}
	}
}
