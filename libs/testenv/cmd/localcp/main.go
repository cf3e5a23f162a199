// Command localcp runs a long-lived local control plane for `make demo` and for people: etcd,
// kube-apiserver (with its aggregator) and kube-controller-manager built by libs/builder, with
// CRDs, webhooks and manifests installed; optionally the real Flux source-controller and
// helm-controller, a loopback Helm repository of charts, and APIServices for aggregated servers
// on local ports; optionally a real OVN and the real kube-scheduler. It writes <dir>/kubeconfig and
// <dir>/webhook.env (with ETCD_URL, the etcd it runs, for stand-ins that keep state there,
// OVN_NB, and with a real node NODE_REGISTRY, NODE_HOST_IP and OVN_NB_NODE, where the node's pods
// reach the machine and OVN), and stops everything cleanly on SIGTERM or SIGINT. With a real node
// and Flux it also runs kustomize-controller, to install the platform as a provider does. etcd's
// data stays in <dir>/etcd across runs. With --users it also writes <dir>/users/<name>.kubeconfig
// for each example user: a client certificate the apiserver accepts, with the group an OIDC
// provider would give (tenant-acme-admin, say), so that anyone can sit in a tenant's seat.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/libs/testenv/node"
)

func main() {
	dir := flag.String("dir", ".local", "State directory (etcd data, kubeconfig, logs).")
	crds := flag.String("crds", "", "Comma-separated directories of CRDs to install.")
	webhooks := flag.String("webhooks", "", "Comma-separated FILE[=PORT]: webhook configurations (validating and mutating) to install, served on PORT (default --webhook-port); each is named after its chart (FILE is <chart>/files/manifests.yaml).")
	apply := flag.String("apply", "", "Comma-separated manifest files to apply after start.")
	webhookPort := flag.Int("webhook-port", 19443, "Port on 127.0.0.1 the webhooks are served on.")
	moduleCRDs := flag.String("module-crds", "", "Comma-separated module@version whose config/crd/bases to install (Flux's, CloudNativePG's, …).")
	flux := flag.Bool("flux", false, "Install Flux's CRDs and run the source-controller and helm-controller the builder built.")
	fluxStoragePort := flag.Int("flux-storage-port", 0, "Port on 127.0.0.1 where source-controller serves its artifacts, with --flux; 0 takes a free one (artifacts stored before then name a port gone).")
	charts := flag.String("charts", "", "Comma-separated chart directories to serve as a Helm repository.")
	chartsPort := flag.Int("charts-port", 18080, "Port on 127.0.0.1 of the Helm repository.")
	apiServices := flag.String("apiservices", "", "Comma-separated group/version=port: APIServices pointing at aggregated servers on 127.0.0.1.")
	users := flag.String("users", "", "Comma-separated name=group: users to write a kubeconfig for (<dir>/users/<name>.kubeconfig).")
	ovn := flag.Bool("ovn", false, "Run OVN (NB and SB ovsdb-server, ovn-northd; fetched into the cache by libs/builder/ovn.sh); its NB address goes into <dir>/webhook.env as OVN_NB.")
	scheduler := flag.Bool("scheduler", false, "Run kube-scheduler (every node scored), Nodes being made by hand.")
	extenders := flag.String("scheduler-extenders", "", "Comma-separated URLs of kube-scheduler extenders (filter, prioritize; ignorable), with --scheduler. With --node, {service-ip:N} in a URL is the Nth address of the node's Service range (a Service given that clusterIP).")
	schedulerMetrics := flag.Int("scheduler-metrics-port", 0, "Port on 127.0.0.1 where kube-scheduler serves /metrics/resources to anyone (HTTPS), with --scheduler; 0: none.")
	realNode := flag.Bool("node", false, "Run a real node (containerd, kubelet, kube-proxy, CoreDNS, volumes on its disk; libs/testenv/node) once its binaries are built, with its state in <dir>/node. Needs root. The node's network index is kept in <dir>/node-index, its registry's address goes into <dir>/webhook.env as NODE_REGISTRY.")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	o := options{dir: *dir, crds: split(*crds), webhooks: split(*webhooks), apply: split(*apply), webhookPort: *webhookPort,
		moduleCRDs: split(*moduleCRDs), flux: *flux, charts: split(*charts), chartsPort: *chartsPort, apiServices: split(*apiServices),
		users: split(*users), fluxStoragePort: *fluxStoragePort, scheduler: *scheduler, extenders: split(*extenders), schedulerMetrics: *schedulerMetrics, ovn: *ovn, node: *realNode}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "localcp:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

type options struct {
	dir                               string
	crds, webhooks, apply, moduleCRDs []string
	charts, apiServices, users        []string
	extenders                         []string
	scheduler, ovn, node              bool
	webhookPort, chartsPort           int
	fluxStoragePort                   int
	schedulerMetrics                  int
	flux                              bool
}

func run(o options) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	hooks, mutating, err := readWebhooks(o.webhooks)
	if err != nil {
		return err
	}
	if o.flux {
		o.moduleCRDs = append(o.moduleCRDs, append(testenv.FluxModules, testenv.KustomizeModule)...)
	}
	modules, err := testenv.ModuleCRDDirs(o.moduleCRDs...)
	if err != nil {
		return err
	}
	// A node's network is the one the state was made with (its Services' addresses are in etcd).
	index, err := nodeIndex(dir, o.node)
	if err != nil {
		return err
	}
	env, err := testenv.Start(testenv.Options{CRDDirs: append(o.crds, modules...), Webhooks: hooks, MutatingWebhooks: mutating, WebhookPort: o.webhookPort,
		Aggregation: true, DataDir: dir, Node: o.node, NodeIndex: index})
	if err != nil {
		return err
	}
	if o.node {
		if err := os.WriteFile(filepath.Join(dir, "node-index"), []byte(strconv.Itoa(env.NodeNet.Index)), 0o600); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	defer func() { _ = env.Stop() }()
	var realNode *node.Node // stopped before the control plane: its containers go with it
	defer func() {
		if realNode != nil {
			realNode.Stop()
		}
	}()
	defer mu.Lock() // after cancel: a start under way ends before the processes are stopped
	defer cancel()
	for _, a := range o.apiServices {
		gv, port, ok := strings.Cut(a, "=")
		group, version, ok2 := strings.Cut(gv, "/")
		p, err := strconv.Atoi(port)
		if !ok || !ok2 || err != nil {
			return fmt.Errorf("--apiservices: want group/version=port, got %q", a)
		}
		if err := testenv.RegisterAPIService(ctx, env.Client, "flotilla-system", group, version, p); err != nil {
			return err
		}
	}
	for _, f := range o.apply {
		if err := testenv.ApplyFile(ctx, env.Client, f); err != nil {
			return err
		}
	}
	w := env.WebhookInstallOptions
	webhookEnv := fmt.Sprintf("WEBHOOK_PORT=%d\nWEBHOOK_CERT_DIR=%s\nETCD_URL=%s\n", w.LocalServingPort, w.LocalServingCertDir, env.ControlPlane.Etcd.URL)
	if o.ovn {
		nb, err := testenv.StartOVN("")
		if err != nil {
			return err
		}
		defer func() { _ = nb.Stop() }()
		webhookEnv += fmt.Sprintf("OVN_NB=%s\nOVN_ROOT=%s\n", nb.NB(), nb.Root)
		if o.node { // the net-controller's pods reach it at the machine's end of the node's link
			tcp, err := nb.ServeNB(env.NodeNet.HostIP(), 6641)
			if err != nil {
				return err
			}
			webhookEnv += fmt.Sprintf("OVN_NB_NODE=%s\n", tcp)
		}
	}
	if o.node {
		webhookEnv += fmt.Sprintf("NODE_REGISTRY=%s\nNODE_HOST_IP=%s\n", env.NodeNet.RegistryAddr(), env.NodeNet.HostIP())
		// SERVICE_IP_<N>: the address each {service-ip:N} of --scheduler-extenders stands for, the
		// clusterIP its Service is to be given.
		for _, m := range serviceIP.FindAllStringSubmatch(strings.Join(o.extenders, ","), -1) {
			n, _ := strconv.Atoi(m[1])
			webhookEnv += fmt.Sprintf("SERVICE_IP_%d=%s\n", n, env.NodeNet.ServiceIP(n))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "webhook.env"), []byte(webhookEnv), 0o600); err != nil {
		return err
	}
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	if err := writeUserKubeconfigs(env, filepath.Join(dir, "users"), o.users); err != nil {
		return err
	}
	// The kubeconfig last: `make demo` takes it as the sign that everything above is there.
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dir, "kubeconfig"))
	fmt.Printf("control plane ready at %s; kubeconfig %s\n", env.Config.Host, filepath.Join(dir, "kubeconfig"))
	// kube-controller-manager, Flux, the Helm repository and kube-scheduler start once their
	// binaries are built: `make demo` builds them while the control plane already serves (the
	// tenants need none of them; the app catalog's definitions wait for kube-controller-manager,
	// which aggregates the delivery role). One goroutine, in the order the demo builds them; mu
	// keeps Stop out of a start.
	later := make(chan error, 1)
	go func() {
		mu.Lock()
		defer mu.Unlock()
		later <- startLater(ctx, env, dir, o, &realNode)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-later:
		if err != nil {
			return err
		}
		<-sig
	}
	fmt.Println("stopping control plane")
	return nil
}

// startLater starts kube-controller-manager, Flux, the Helm repository, kube-scheduler and the real
// node, in that order, each once the builder has built what it runs (at once when it has).
func startLater(ctx context.Context, env *testenv.Env, dir string, o options, realNode **node.Node) error {
	// Until it runs, namespaces are not deleted, garbage is not collected, ResourceQuotas have no
	// status (quota admission refuses pods under one) and the tenant roles aggregate no rules.
	if err := built(ctx, "kube-controller-manager"); err != nil {
		return err
	}
	if err := env.StartControllerManager(dir); err != nil {
		return err
	}
	fmt.Println("kube-controller-manager started")
	if o.flux {
		if err := built(ctx, "source-controller", "helm-controller"); err != nil {
			return err
		}
		env.FluxStoragePort = o.fluxStoragePort
		if err := env.StartFlux(ctx, filepath.Join(dir, "flux")); err != nil {
			return err
		}
		fmt.Println("Flux started")
	}
	if len(o.charts) > 0 {
		if err := built(ctx, "helm"); err != nil {
			return err
		}
		repoDir := filepath.Join(dir, "charts")
		if err := os.RemoveAll(repoDir); err != nil {
			return err
		}
		if err := os.MkdirAll(repoDir, 0o700); err != nil {
			return err
		}
		repo, err := testenv.ServeCharts(repoDir, o.chartsPort, o.charts...)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, func() { _ = repo.Close() })
		fmt.Printf("serving %d charts at %s\n", len(o.charts), repo.URL)
	}
	if o.scheduler {
		if err := built(ctx, "kube-scheduler"); err != nil {
			return err
		}
		var ext []schedconfigv1.Extender
		for _, u := range o.extenders {
			if env.NodeNet != nil {
				u = serviceIP.ReplaceAllStringFunc(u, func(m string) string {
					n, _ := strconv.Atoi(serviceIP.FindStringSubmatch(m)[1])
					return env.NodeNet.ServiceIP(n).String()
				})
			}
			ext = append(ext, schedconfigv1.Extender{URLPrefix: u, FilterVerb: "filter", PrioritizeVerb: "prioritize", Weight: 5,
				NodeCacheCapable: true, Ignorable: true, HTTPTimeout: metav1.Duration{Duration: 2 * time.Second}})
		}
		if _, err := env.StartScheduler(dir, testenv.SchedulerOptions{Extenders: ext, PercentageOfNodesToScore: 100, MetricsPort: o.schedulerMetrics}); err != nil {
			return err
		}
		fmt.Println("kube-scheduler started")
	}
	if o.node {
		if err := built(ctx, "kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "cni-ptp", "cni-host-local", "cni-loopback", "registry", "coredns", "kube-router", "local-path-provisioner"); err != nil {
			return err
		}
		start := time.Now()
		n, err := node.Start(ctx, env, node.Options{Dir: filepath.Join(dir, "node")})
		if err != nil {
			return err
		}
		*realNode = n
		if err := n.StartLocalVolumes(ctx); err != nil {
			return err
		}
		// With a node, the platform can be installed the way a provider does, by Flux Kustomizations.
		if o.flux {
			if err := built(ctx, "kustomize-controller"); err != nil {
				return err
			}
			if err := env.StartKustomizeController(filepath.Join(dir, "flux")); err != nil {
				return err
			}
		}
		fmt.Printf("node %s Ready with CoreDNS and volumes on its disk (StorageClass %s) in %.1fs, its images from the registry at %s\n",
			n.Name, node.LocalVolumes, time.Since(start).Seconds(), n.Registry)
	}
	return nil
}

// serviceIP is the {service-ip:N} of --scheduler-extenders.
var serviceIP = regexp.MustCompile(`\{service-ip:(\d+)\}`)

// nodeIndex is the node network index the state in dir was made with, 0 (the lowest free) for new
// state, or none without a node.
func nodeIndex(dir string, withNode bool) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "node-index"))
	if os.IsNotExist(err) || !withNode {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// built waits until the builder's binaries of these names exist (build.sh links them before it
// builds them).
func built(ctx context.Context, names ...string) error {
	bin, err := testenv.BinDir()
	if err != nil {
		return err
	}
	for _, n := range names {
		for {
			if _, err := os.Stat(filepath.Join(bin, n)); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// writeUserKubeconfigs writes a kubeconfig per name=group: a user of that name in that group.
func writeUserKubeconfigs(env *testenv.Env, dir string, users []string) error {
	if len(users) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, u := range users {
		name, group, ok := strings.Cut(u, "=")
		if !ok || name == "" || group == "" {
			return fmt.Errorf("--users: want name=group, got %q", u)
		}
		user, err := env.AddUser(envtest.User{Name: name, Groups: []string{group}}, nil)
		if err != nil {
			return err
		}
		raw, err := user.KubeConfig()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".kubeconfig"), raw, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// readWebhooks reads FILE[=PORT] entries: each file's configurations, named after the chart the
// file is in (as the chart names them). A configuration with a port of its own points at that port
// on 127.0.0.1 from its creation: kube-apiserver (v0.37) may keep serving a configuration updated
// right after its creation from its cached accessors, so it is never created pointing elsewhere.
func readWebhooks(entries []string) ([]*admissionv1.ValidatingWebhookConfiguration, []*admissionv1.MutatingWebhookConfiguration, error) {
	var hooks []*admissionv1.ValidatingWebhookConfiguration
	var mutating []*admissionv1.MutatingWebhookConfiguration
	for _, e := range entries {
		path, port, hasPort := strings.Cut(e, "=")
		p, err := strconv.Atoi(port)
		if hasPort && err != nil {
			return nil, nil, fmt.Errorf("--webhooks: want FILE[=PORT], got %q", e)
		}
		chart := filepath.Base(filepath.Dir(filepath.Dir(path)))
		v, err := testenv.ReadWebhooks(path)
		if err != nil {
			return nil, nil, err
		}
		m, err := testenv.ReadMutatingWebhooks(path)
		if err != nil {
			return nil, nil, err
		}
		var configs []*admissionv1.WebhookClientConfig
		for i, h := range v {
			h.Name = nameFor(chart, i)
			for j := range h.Webhooks {
				configs = append(configs, &h.Webhooks[j].ClientConfig)
			}
		}
		for i, h := range m {
			h.Name = nameFor(chart, i)
			for j := range h.Webhooks {
				configs = append(configs, &h.Webhooks[j].ClientConfig)
			}
		}
		for _, cc := range configs {
			if hasPort && cc.Service != nil {
				u := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), Path: ptr.Deref(cc.Service.Path, "/")}
				cc.URL, cc.Service = ptr.To(u.String()), nil
			}
		}
		hooks, mutating = append(hooks, v...), append(mutating, m...)
	}
	return hooks, mutating, nil
}

func nameFor(chart string, i int) string {
	if i == 0 {
		return chart
	}
	return fmt.Sprintf("%s-%d", chart, i)
}
