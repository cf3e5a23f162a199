package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// seatRoles are acme's users in `make demo`, one per tenant role, least first.
var seatRoles = []struct{ role, user string }{{"view", "acme-viewer"}, {"use", "acme-user"}, {"admin", "acme-admin"}}

// seatCase is one thing a tenant's user tries with plain kubectl. allow is the least tenant role
// that may do it ("" for none); the others must be refused by the server, naming the user.
type seatCase struct {
	name, allow string
	args        []string // {role} is the role's name
	stdin       string
	want        string   // in the output when allowed
	undo        []string // run by the same user after an allowed run: it must work too
}

// seatCases: what a tenant uses of every service, and what it must not reach. Writes to what the
// platform owns, and changes to what the demo shows, are server-side dry runs: refused or not,
// they change nothing.
func seatCases() []seatCase {
	now := time.Now().UTC()
	return []seatCase{
		// The catalog it orders from, and what each kind takes.
		{name: "read the catalog", allow: "view", args: []string{"get", "applicationdefinitions", "-o", "wide"}, want: "A replicated PostgreSQL cluster"},
		{name: "explain an app kind", allow: "view", args: []string{"explain", "redises.spec", "--api-version", "apps.flotilla.dev/v1alpha1"}, want: "maxMemory"},
		{name: "change the catalog", args: []string{"delete", "applicationdefinition", "redises", "--dry-run=server"}},
		{name: "read the catalog's sources", args: []string{"get", "catalogsources"}},
		// Its apps, and the managed cluster's kubeconfig its Kubernetes app names.
		{name: "list its apps", allow: "view", args: []string{"get", "postgres,redis,kubernetes", "-n", "tenant-acme"}, want: "orders"},
		{name: "order an app", allow: "admin", args: []string{"create", "-f", "-", "--dry-run=server"},
			stdin: "apiVersion: apps.flotilla.dev/v1alpha1\nkind: Redis\nmetadata: {name: seat{role}, namespace: tenant-acme}\nspec: {}\n"},
		{name: "find its cluster's kubeconfig", allow: "view", args: []string{"get", "kubernetes", "demo", "-n", "tenant-acme", "-o", "jsonpath={.status.outputs}"}, want: "k8s-demo-admin-kubeconfig"},
		{name: "read its cluster's kubeconfig", allow: "admin", args: []string{"get", "secret", "k8s-demo-admin-kubeconfig", "-n", "tenant-acme", "-o", "jsonpath={.data.kubeconfig}"}},
		// Storage: the classes it may claim from, a claim on one, not the pools behind them.
		{name: "read the storage classes", allow: "view", args: []string{"get", "storageclasses"}, want: "replicated"},
		{name: "read the scheduling classes", allow: "view", args: []string{"get", "schedulingclasses"}, want: "two-zones"},
		{name: "read the storage policies", args: []string{"get", "storagepolicies"}},
		{name: "make a storage class", args: []string{"create", "-f", "-", "--dry-run=server"},
			stdin: "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: seat-{role}}\nprovisioner: linstor.csi.linbit.com\n"},
		{name: "claim a volume of an offered class", allow: "admin", args: []string{"create", "-f", "-"},
			stdin: "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: seat-{role}, namespace: tenant-acme}\n" +
				"spec: {storageClassName: replicated, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
			undo: []string{"delete", "pvc", "seat-admin", "-n", "tenant-acme", "--wait=false"}},
		{name: "list its claims", allow: "view", args: []string{"get", "pvc", "-n", "tenant-acme"}},
		// Its tenants and quotas: granted and used, read-only.
		{name: "label its child tenant", allow: "admin", args: []string{"label", "tenant", "dev", "-n", "tenant-acme", "seat={role}", "--dry-run=server"}},
		{name: "list its child tenants", allow: "view", args: []string{"get", "tenants", "-n", "tenant-acme"}, want: "dev"},
		{name: "make a child tenant", allow: "admin", args: []string{"create", "-f", "-", "--dry-run=server"},
			stdin: "apiVersion: tenancy.flotilla.dev/v1alpha1\nkind: Tenant\nmetadata: {name: seat{role}, namespace: tenant-acme}\n" +
				"spec: {resourceQuotas: {requests.cpu: \"1\", requests.memory: 1Gi, count/pods: \"10\"}}\n"},
		{name: "read its quotas", allow: "view", args: []string{"get", "resourcequotas", "-n", "tenant-acme", "-o", "wide"}, want: "requests.cpu"},
		{name: "change its quotas", args: []string{"delete", "resourcequotas", "--all", "-n", "tenant-acme", "--dry-run=server"}},
		// Networks: its own, not the platform's pools and subnets.
		{name: "label its network", allow: "admin", args: []string{"label", "tenantnetwork", "private", "-n", "tenant-acme", "seat={role}", "--dry-run=server"}},
		{name: "list its networks", allow: "view", args: []string{"get", "tenantnetworks", "-n", "tenant-acme"}, want: "192.168.0.0/24"},
		{name: "make a network", allow: "admin", args: []string{"create", "-f", "-"},
			stdin: "apiVersion: net.flotilla.dev/v1alpha1\nkind: TenantNetwork\nmetadata: {name: seat-{role}, namespace: tenant-acme}\nspec: {cidr: 10.250.0.0/24}\n",
			undo:  []string{"delete", "tenantnetwork", "seat-admin", "-n", "tenant-acme", "--wait=false"}},
		{name: "read the subnet pools", args: []string{"get", "subnetpools"}},
		// What it used, without flags.
		{name: "ask what it used", allow: "view", args: []string{"create", "-f", "-", "-o", "yaml"}, want: "vCPUHours",
			stdin: fmt.Sprintf("apiVersion: usage.flotilla.dev/v1alpha1\nkind: UsageReport\nmetadata: {namespace: tenant-acme}\nspec: {startTimestamp: %q, endTimestamp: %q}\n",
				now.Add(-10*time.Minute).Format(time.RFC3339), now.Format(time.RFC3339))},
		// Another tenant.
		{name: "list another tenant's apps", args: []string{"get", "postgres", "-n", "tenant-beta"}},
		{name: "list another tenant's networks", args: []string{"get", "tenantnetworks", "-n", "tenant-beta"}},
		{name: "ask what another tenant used", args: []string{"create", "-f", "-"},
			stdin: fmt.Sprintf("apiVersion: usage.flotilla.dev/v1alpha1\nkind: UsageReport\nmetadata: {namespace: tenant-beta}\nspec: {startTimestamp: %q, endTimestamp: %q}\n",
				now.Add(-10*time.Minute).Format(time.RFC3339), now.Format(time.RFC3339))},
	}
}

// tenantSeat sits in each of acme's seats of a running `make demo` (its state in dir) with plain
// kubectl and a fresh cache: every case its role allows works, every other is refused by the
// server naming the user, and none fails on the client's side. Acme's admin then reaches its
// managed cluster with the kubeconfig its app names.
func tenantSeat(t *testing.T, dir string) {
	t.Helper()
	kubectl := tool(t, "kubectl")
	rank := func(role string) int {
		return slices.IndexFunc(seatRoles, func(r struct{ role, user string }) bool { return r.role == role })
	}
	var kubeconfig string
	for _, r := range seatRoles {
		cache := t.TempDir()
		for _, c := range seatCases() {
			args := []string{"--kubeconfig", filepath.Join(dir, "users", r.user+".kubeconfig"), "--cache-dir", cache}
			for _, a := range c.args {
				args = append(args, strings.ReplaceAll(a, "{role}", r.role))
			}
			cmd := exec.Command(kubectl, args...)
			cmd.Stdin = strings.NewReader(strings.ReplaceAll(c.stdin, "{role}", r.role))
			raw, err := cmd.CombinedOutput()
			out := string(raw)
			allowed := c.allow != "" && rank(r.role) >= rank(c.allow)
			switch {
			case allowed && err != nil:
				t.Errorf("%s may %s: %v\n%s", r.user, c.name, err, out)
			case allowed && !strings.Contains(out, c.want):
				t.Errorf("%s may %s, but the output lacks %q:\n%s", r.user, c.name, c.want, out)
			case !allowed && (err == nil || !strings.Contains(out, fmt.Sprintf("User %q cannot", r.user))):
				t.Errorf("%s may not %s: want the server's refusal naming the user, got %v:\n%s", r.user, c.name, err, out)
			}
			if allowed && err == nil && len(c.undo) > 0 {
				if out, err := exec.Command(kubectl, append(args[:4:4], c.undo...)...).CombinedOutput(); err != nil {
					t.Errorf("%s may undo %s: %v\n%s", r.user, c.name, err, out)
				}
			}
			if c.name == "read its cluster's kubeconfig" && allowed && err == nil {
				kubeconfig = out
			}
		}
	}
	// The managed cluster answers its kubeconfig, with a fresh cache too.
	raw, err := base64.StdEncoding.DecodeString(kubeconfig)
	if err != nil || len(raw) == 0 {
		t.Fatalf("acme's admin got no kubeconfig of its cluster (%v)", err)
	}
	file := filepath.Join(t.TempDir(), "k8s-demo.kubeconfig")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", file, "--cache-dir", t.TempDir(), "get", "nodes").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "k8s-demo-default-") {
		t.Errorf("acme's cluster's kubeconfig: get nodes: %v\n%s", err, out)
	}
}
