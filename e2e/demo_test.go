package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// `make demo` works as the README promises: the control plane starts, the controllers run as
// their own processes (until the node takes them), the example tenant tree becomes Ready and is printed, the starter catalog
// is served and the Postgres ordered in tenant acme is Ready, the storage policies are Ready on the
// LINSTOR test double; acme's Kubernetes cluster is Ready and its nodes are listed with the
// customer's kubeconfig; as root, a real node joins, the platform moves onto it from its own
// release (demoPlatformPods), and acme's Redis runs on it and answers;
// each of acme's tenant roles uses every service with plain kubectl as its role allows (tenantSeat);
// `make demo-down` stops everything.
// demoPorts is how many local ports demo.sh uses from FLOTILLA_PORT_BASE on (base to base+13).
const demoPorts = 14

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole local platform")
	}
	state := t.TempDir()
	env := append(os.Environ(), "FLOTILLA_STATE="+state, fmt.Sprintf("FLOTILLA_PORT_BASE=%d", freePorts(t, demoPorts)))
	demo := func(verb string) (string, error) {
		cmd := exec.Command("bash", "demo.sh", verb)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := demo("down"); err != nil {
			t.Errorf("demo down: %v\n%s", err, out)
		}
	})
	out, err := demo("up")
	if err != nil {
		t.Fatalf("demo up: %v\n%s", err, out)
	}
	// The core (the control plane, the tenants, the app catalog) answers before the other parts,
	// which join as their builds finish.
	for _, want := range []string{"the platform answers kubectl", "tenant-acme-dev", "dev.acme.example.org", "export KUBECONFIG=", "postgreses"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, " True"); n < 4 {
		t.Errorf("want 4 Ready tenants in the tree, found %d:\n%s", n, out)
	}
	// The tenant's seat: acme's administrator orders a Redis right after the platform is up, and
	// a claim too large for the storage policy is refused with the numbers; beta's administrator
	// may not even read acme's apps.
	// Usage: acme's viewer's report holds the Postgres app's pod, scheduled by the real
	// kube-scheduler and scraped by VictoriaMetrics.
	if !strings.Contains(out, "kind: Postgres") || !strings.Contains(out, "name: orders") || !strings.Contains(out, "vCPUHours:") ||
		!strings.Contains(out, "storageClassName: replicated") {
		t.Errorf("demo output lacks acme's usage report with its Postgres orders and their volume:\n%s", out)
	}
	for _, want := range []string{"redis.apps.flotilla.dev/cache created", "redis.apps.flotilla.dev/cache condition met",
		"pod redis-cache-0 cannot be scheduled: ", // its claim names no StorageClass, and none is the default
		"2 replicas of 150Gi: the largest free on 2 distinct zones is 100Gi",
		`User "beta-admin" cannot list resource "postgreses"`,
		// A tenant claims only its own host names and addresses.
		"spec.rules[].host: shop.beta.example.org is not acme.example.org or a name below it",
		"ingress.networking.k8s.io/shop created",
		"spec.type: NodePort, and spec.ports[].nodePort, open a port on every node"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	starting, ordered, replicated := false, false, false
	zones := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// "web-1 on node-4 in zone-b": tenant beta's pods, placed by its SchedulingClass.
		if len(f) == 5 && strings.HasPrefix(f[0], "web-") && f[1] == "on" && f[3] == "in" {
			zones[f[4]] = true
		}
		// NAME READY VERSION STATUS AGE: acme's Postgres, installed and waiting for its database
		// (no operator runs before the node), then Ready once it runs there (as root).
		starting = starting || (len(f) >= 4 && f[0] == "orders" && f[1] == "False" && strings.Contains(line, "waiting for"))
		ordered = ordered || (len(f) >= 2 && f[0] == "orders" && f[1] == "True")
		// NAME REPLICAS SPREAD LARGEST READY: the storage policy on the LINSTOR test double.
		replicated = replicated || (len(f) >= 5 && f[0] == "replicated" && f[3] == "100Gi" && f[4] == "True")
	}
	if !starting {
		t.Errorf("the Postgres orders is not shown installed and waiting for its database:\n%s", out)
	}
	if !ordered && os.Geteuid() == 0 {
		t.Errorf("the Postgres orders is not shown Ready once it runs on the real node:\n%s", out)
	}
	if !replicated {
		t.Errorf("the StoragePolicy replicated is not shown Ready with its capacity:\n%s", out)
	}
	if len(zones) != 2 {
		t.Errorf("tenant beta's two pods are not shown in two zones (%v):\n%s", zones, out)
	}
	// Two tenants' networks with one range, each with a router of its own on OVN.
	for _, want := range []string{"lr.tenant-acme/private", "lr.tenant-beta/private"} {
		if strings.Count(out, want) < 2 { // in kubectl's table and in ovn-nbctl's router list
			t.Errorf("demo output lacks the network router %s in the API and in OVN:\n%s", want, out)
		}
	}
	// acme's administrator sees its own networks (the net-controller's chart's tenant roles).
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) >= 4 && f[0] == "private" && f[1] == "192.168.0.0/24" && f[3] == "True" // NAME CIDR SNAT READY
	}) {
		t.Errorf("acme's administrator is not shown its TenantNetwork private:\n%s", out)
	}
	// The node agent's rule in node-1's namespace (the demo needs root for it).
	if os.Geteuid() == 0 && !strings.Contains(out, "from 203.0.113.2 lookup 110 proto 241") {
		t.Errorf("the node agent's policy rule is not shown:\n%s", out)
	}
	// As root, a real node joins: Ready, with CoreDNS running on it from the node's registry.
	if os.Geteuid() == 0 {
		nodeReady, dns := false, false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			nodeReady = nodeReady || len(f) >= 5 && strings.HasPrefix(f[0], "worker-") && f[1] == "Ready" && f[4] == "v1.37.2"
			dns = dns || len(f) >= 7 && strings.HasPrefix(f[0], "coredns-") && f[1] == "1/1" && f[2] == "Running" && strings.HasPrefix(f[6], "worker-")
		}
		if !nodeReady || !dns {
			t.Errorf("the real node is not shown Ready (%v) with CoreDNS running on it (%v):\n%s", nodeReady, dns, out)
		}
		// The platform moved onto it, from its release.
		if !strings.Contains(out, "the platform runs as pods ") {
			t.Errorf("the demo does not say the platform runs as pods:\n%s", out)
		}
		demoPlatformPods(t, state)
		// acme's Redis runs there from an image built here, and answers its admin.
		if !slices.Contains(strings.Split(out, "\n"), "    PONG") {
			t.Errorf("acme's Redis on the real node does not answer PING:\n%s", out)
		}
		// acme's Postgres runs there too: acme's pod runs select 1 with the operator's credentials,
		// and beta's pod gets no answer from the server.
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			return slices.Equal(strings.Fields(line), []string{"tenant-acme/orders-client:", "1"})
		}) || !strings.Contains(out, "tenant-beta/orders-probe:") || !strings.Contains(out, ".tenant-acme.svc:5432 - no response") {
			t.Errorf("acme's Postgres on the real node does not answer acme's select 1, or answers beta:\n%s", out)
		}
		// acme's etcd there too, answering over TLS with the client certificate in acme's namespace.
		if !strings.Contains(out, "tenant-acme/etcd-client: https://etcd.tenant-acme.svc:2379 is healthy") {
			t.Errorf("acme's etcd on the real node does not answer etcdctl endpoint health over TLS:\n%s", out)
		}
		// Isolation on packets: a tenant's namespace lets in its own pods, its ancestors', its
		// descendants' and the platform's, never a sibling subtree's nor another namespace's (FROM,
		// ACME'S REDIS, DEV'S SERVER).
		for _, want := range [][]string{
			{"tenant-root", "reached", "reached"},
			{"tenant-acme", "reached", "reached"},
			{"tenant-acme-dev", "reached", "reached"},
			{"tenant-beta", "refused", "refused"},
			{"flotilla-system", "reached", "reached"},
			{"default", "refused", "refused"},
		} {
			if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool { return slices.Equal(strings.Fields(line), want) }) {
				t.Errorf("the isolation table lacks the row %v:\n%s", want, out)
			}
		}
		// A Redis asking for more CPU than acme's LimitRange allows: installed, not Ready, and
		// saying why in kube-apiserver's words.
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			f := strings.Fields(line)
			return len(f) >= 2 && f[0] == "toobig" && f[1] == "False"
		}) || !strings.Contains(out, "StatefulSet redis-toobig cannot create its pods: ") || !strings.Contains(out, "cpu limit of 500m") {
			t.Errorf("acme's Redis too large for its LimitRange is not shown not Ready with the reason:\n%s", out)
		}
	}
	if !strings.Contains(out, "pod/db condition met") {
		t.Errorf("acme's database pod was not scheduled with its volume:\n%s", out)
	}
	demoCluster(t, out)
	// Every service, from each of acme's seats, with plain kubectl.
	tenantSeat(t, state)
}

// demoCluster checks what the demo shows of the Kubernetes cluster acme orders through the apps
// API: the app and its KubernetesCluster Ready with both workers (Cluster API's real managers, the
// local provider stand-in), the nodes listed by kubectl with the customer's kubeconfig against the
// customer's own API server, the base add-ons (CNI, CSI node plugin) and the ingress add-on inside, and a third node after scaling; the
// DataStore of the tenant's etcd and the etcd apps the catalog ordered (not Ready: their pods cannot run here); its
// cloud-controller-manager, CSI controller and autoscaler available in the platform's namespace,
// which acme's admin may not list.
func demoCluster(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"kubernetes.apps.flotilla.dev/demo created", "kubernetes.apps.flotilla.dev/demo patched",
		"kubectl --kubeconfig ", "ingress-settings", "daemonset.apps/flannel", "flannel-config", "daemonset.apps/kubevirt-csi-node", "driver-config", "csi.kubevirt.io", "default 3/3 ready",
		".svc:2379]", "etcd-ca", // the Kamaji DataStore of acme's etcd
		`cannot list resource "deployments" in API group "apps" in the namespace "flotilla-cluster-infra"`} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	appReady, clusterReady, infra := false, false, 0
	// The nodes each "get nodes" against the customer's API server lists (NAME STATUS ROLES AGE VERSION).
	var listings []map[string]bool
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if strings.HasPrefix(strings.TrimSpace(line), "$ kubectl --kubeconfig ") && strings.HasSuffix(line, " get nodes") {
			listings = append(listings, map[string]bool{})
			continue
		}
		// NAME READY VERSION AGE: the app, as acme's administrator sees it.
		appReady = appReady || (len(f) >= 2 && f[0] == "demo" && f[1] == "True")
		// NAME VERSION ENDPOINT WORKERS READY …: the KubernetesCluster the app rendered.
		clusterReady = clusterReady || (len(f) >= 8 && f[0] == "k8s-demo" && strings.Contains(line, "default 2/2 ready   True"))
		// NAME READY UP-TO-DATE AVAILABLE AGE: an infrastructure controller of the cluster.
		if len(f) == 5 && strings.HasPrefix(f[0], "kc-") && f[1] == "1/1" && f[3] == "1" {
			infra++
		}
		if len(listings) > 0 && len(f) == 5 && strings.HasPrefix(f[0], "k8s-demo-default-") && f[1] == "Ready" {
			listings[len(listings)-1][f[0]] = true
		}
	}
	if !appReady {
		t.Errorf("the Kubernetes app demo is not shown Ready:\n%s", out)
	}
	// NAMESPACE NAME READY STATUS: the etcd the catalog ordered for each tenant hosting one,
	// installed but not Ready, saying why: its pods cannot run here.
	for _, ns := range []string{"tenant-root", "tenant-acme-dev"} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			f := strings.Fields(line)
			return len(f) >= 5 && f[0] == ns && f[1] == "etcd" && f[2] == "False" && f[3] == "pod"
		}) {
			t.Errorf("the etcd ordered for %s is not shown not Ready with why its pods cannot start:\n%s", ns, out)
		}
	}
	if !clusterReady {
		t.Errorf("the KubernetesCluster k8s-demo is not shown Ready with 2/2 workers:\n%s", out)
	}
	if infra != 3 {
		t.Errorf("want the cluster's 3 infrastructure controllers shown available, got %d:\n%s", infra, out)
	}
	if len(listings) != 2 || len(listings[0]) != 2 || len(listings[1]) != 3 {
		t.Errorf("want the customer's 2 Ready nodes, then 3 after scaling, listed with its kubeconfig; got %v:\n%s", listings, out)
	}
}
