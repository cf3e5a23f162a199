// Package node runs a real Kubernetes node beside a local control plane (testenv.Start with
// Options.Node): containerd with runc, kubelet, kube-proxy (iptables), CNI (ptp and host-local) and
// kube-router's firewall enforcing NetworkPolicies (iptables and ipset), in network and mount
// namespaces of their own joined to the machine by a veth pair, pulling every image from a CNCF
// distribution registry on that link, with CoreDNS for Service names. Needs root.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// Options shape a node.
type Options struct {
	// Dir holds the node's state: containerd's, kubelet's, the registry's, the logs.
	Dir string
	// Name is the Node's name; "worker-<network index>" when empty.
	Name string
}

// Node is a running node.
type Node struct {
	Name string
	Net  *testenv.NodeNetwork
	Dir  string
	// Registry is the address of the registry containerd pulls from (host:port, plain HTTP).
	Registry string
	// Images are the node's own images in Registry, by name (pause, coredns).
	Images map[string]string
	// Steps are how long each step of Start took, in order.
	Steps []Step

	env    *testenv.Env
	debs   string
	holder *testenv.Process
	procs  []*testenv.Process
}

// Step is one step of Start and how long it took.
type Step struct {
	Name string
	Took time.Duration
}

// Start starts a node for env and waits until it is Ready and CoreDNS answers.
func Start(ctx context.Context, env *testenv.Env, o Options) (_ *Node, err error) {
	if env.NodeNet == nil {
		return nil, errors.New("the control plane was started without Options.Node")
	}
	n := &Node{Name: o.Name, Net: env.NodeNet, Dir: o.Dir, Registry: env.NodeNet.RegistryAddr(), env: env}
	if n.Name == "" {
		n.Name = fmt.Sprintf("worker-%d", n.Net.Index)
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	for _, d := range []string{"logs", "bin", "cni/bin", "cni/net.d", "kubelet", "pod-logs", "registry"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if n.debs, err = testenv.NodeDebsRoot(); err != nil {
		return nil, err
	}
	bin, err := testenv.BinDir()
	if err != nil {
		return nil, err
	}
	if err := n.links(bin); err != nil {
		return nil, err
	}
	killCgroup(n.Net.CgroupParent()) // what a previous run on this network left, if it died
	if err := makeCgroup(n.Net.CgroupParent() + "/runtime"); err != nil {
		return nil, err
	}
	for _, step := range []struct {
		name string
		run  func() error
	}{
		{"namespaces and link", n.startNamespaces},
		{"registry", func() error { return n.startRegistry(bin) }},
		{"node images", func() (err error) { n.Images, err = n.pushNodeImages(ctx, bin); return err }},
		{"containerd", func() error { return n.startContainerd(bin) }},
		{"kubelet", func() error { return n.startKubelet(ctx, bin) }},
		{"kube-proxy", func() error { return n.startKubeProxy(bin) }},
		{"Ready", func() error { return n.waitReady(ctx) }},
		{"kube-router (network policies)", func() error { return n.startNetworkPolicies(ctx, bin) }}, // it looks its Node up
		{"CoreDNS available", func() error { return n.startDNS(ctx) }},
	} {
		t0 := time.Now()
		if err := step.run(); err != nil {
			return nil, err
		}
		n.Steps = append(n.Steps, Step{step.name, time.Since(t0)})
	}
	return n, nil
}

// Stop stops the node and everything it ran (containers included: they are killed by cgroup),
// and removes its link; its state stays in Dir.
func (n *Node) Stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].Stop()
	}
	n.procs = nil
	killCgroup(n.Net.CgroupParent())
	if n.holder != nil {
		n.holder.Stop()
		n.holder = nil
	}
	if l, err := netlink.LinkByName(n.Net.HostLink()); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// links makes <Dir>/bin (runc, and iptables and ipset for kube-proxy and kube-router, from Debian's
// packages) and <Dir>/cni/bin (the CNI plugins, under the names CNI calls them by).
func (n *Node) links(bin string) error {
	links := map[string]string{"bin/runc": filepath.Join(n.debs, "usr/bin/runc"), "bin/ipset": filepath.Join(n.debs, "usr/sbin/ipset")}
	for _, t := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		links["bin/"+t] = filepath.Join(n.debs, "usr/sbin/xtables-nft-multi")
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		links["cni/bin/"+p] = filepath.Join(bin, "cni-"+p)
	}
	for name, target := range links {
		path := filepath.Join(n.Dir, name)
		_ = os.Remove(path)
		if err := os.Symlink(target, path); err != nil {
			return err
		}
	}
	return nil
}

// processEnv is the environment of the node's processes: its own binaries first, and the
// libraries and iptables extensions of the Debian packages.
func (n *Node) processEnv(bin string) []string {
	libs := filepath.Join(n.debs, "usr/lib/x86_64-linux-gnu") + ":" + filepath.Join(n.debs, "lib/x86_64-linux-gnu")
	return []string{
		"PATH=" + filepath.Join(n.Dir, "bin") + ":" + bin + ":" + os.Getenv("PATH"),
		"LD_LIBRARY_PATH=" + libs,
		"XTABLES_LIBDIR=" + filepath.Join(n.debs, "usr/lib/x86_64-linux-gnu/xtables"),
	}
}

// startNamespaces starts the process that holds the node's network and mount namespaces (the
// mounts of containerd and kubelet vanish with it), links them to the machine and routes the
// node's Service and pod ranges there.
func (n *Node) startNamespaces() error {
	// kubelet sets kernel.panic=10 and kernel.panic_on_oops=1, machine-wide: the node's mount
	// namespace shows it files that already say so, and the machine keeps its own settings.
	// containerd's shims keep their sockets in /run/containerd: one of the node's own, gone with it.
	script := "mount --make-rshared / && mkdir -p /run/containerd && mount -t tmpfs tmpfs /run/containerd"
	for name, value := range map[string]string{"panic": "10", "panic_on_oops": "1"} {
		f := filepath.Join(n.Dir, "kernel."+name)
		if err := os.WriteFile(f, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		script += fmt.Sprintf(" && mount --bind %s /proc/sys/kernel/%s", f, name)
	}
	var err error
	n.holder, err = testenv.StartLogged("unshare", filepath.Join(n.Dir, "logs", "namespaces.log"), nil,
		"--net", "--mount", "--propagation", "private", "--", "sh", "-c",
		script+" && echo 1 > /proc/sys/net/ipv4/ip_forward && exec sleep infinity")
	if err != nil {
		return err
	}
	var ns netns.NsHandle
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if ns, err = netns.GetFromPid(n.holder.Pid()); err != nil {
			return false, nil
		}
		self, err := netns.Get()
		if err != nil {
			return false, err
		}
		defer func() { _ = self.Close() }()
		if ns.Equal(self) {
			_ = ns.Close()
			return false, nil // unshare has not unshared yet
		}
		// ip_forward is set last, by the shell that then becomes sleep.
		out, _ := exec.Command("nsenter", "--net=/proc/"+fmt.Sprint(n.holder.Pid())+"/ns/net", "cat", "/proc/sys/net/ipv4/ip_forward").Output()
		if strings.TrimSpace(string(out)) != "1" {
			_ = ns.Close()
			return false, nil
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("the node's namespaces: %w (%s)", err, filepath.Join(n.Dir, "logs", "namespaces.log"))
	}
	defer func() { _ = ns.Close() }()
	if old, err := netlink.LinkByName(n.Net.HostLink()); err == nil {
		_ = netlink.LinkDel(old)
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = n.Net.HostLink()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}); err != nil {
		return fmt.Errorf("veth %s: %w", attrs.Name, err)
	}
	host, err := netlink.LinkByName(attrs.Name)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: &net.IPNet{IP: n.Net.HostIP(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, name := range []string{"lo", "eth0"} {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if name == "eth0" {
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: n.Net.NodeIP(), Mask: net.CIDRMask(24, 32)}}); err != nil {
				return err
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return err
		}
	}
	if err := h.RouteAdd(&netlink.Route{Gw: n.Net.HostIP()}); err != nil {
		return fmt.Errorf("the node's default route: %w", err)
	}
	for _, cidr := range []string{n.Net.ServiceCIDR(), n.Net.PodCIDR()} {
		_, dst, _ := net.ParseCIDR(cidr)
		if err := netlink.RouteReplace(&netlink.Route{Dst: dst, Gw: n.Net.NodeIP(), LinkIndex: host.Attrs().Index}); err != nil {
			return fmt.Errorf("route to %s: %w", cidr, err)
		}
	}
	return nil
}

// inNode starts a program of the node inside its namespaces and cgroup, logging to logs/<name>.log.
func (n *Node) inNode(name, path string, env []string, args ...string) error {
	pid := fmt.Sprint(n.holder.Pid())
	p, err := testenv.StartLogged("nsenter", filepath.Join(n.Dir, "logs", name+".log"), env,
		append([]string{"--net=/proc/" + pid + "/ns/net", "--mount=/proc/" + pid + "/ns/mnt", "--", path}, args...)...)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return joinCgroup(n.Net.CgroupParent()+"/runtime", p.Pid())
}

// waitFor polls cond every 200 ms until timeout, saying what it waited for and where to look.
func waitFor(ctx context.Context, what, log string, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w (see %s)", what, err, log)
	}
	return nil
}

// kubeconfig writes a kubeconfig for user in groups that reaches kube-apiserver over the node's
// link (the address pods and the node's processes use).
func (n *Node) kubeconfig(name, user string, groups ...string) (string, error) {
	u, err := n.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return "", err
	}
	raw, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	url := n.env.ControlPlane.APIServer.SecureServing.URL("https", "").String()
	raw = []byte(strings.ReplaceAll(string(raw), strings.TrimSuffix(url, "/"), n.Net.ControlPlaneURL(n.env.ControlPlane.APIServer.SecureServing.Port)))
	path := filepath.Join(n.Dir, name+".kubeconfig")
	return path, os.WriteFile(path, raw, 0o600)
}

// waitReady waits for the Node to report Ready.
func (n *Node) waitReady(ctx context.Context) error {
	return waitFor(ctx, "node "+n.Name+" to be Ready", filepath.Join(n.Dir, "logs", "kubelet.log"), 3*time.Minute, func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := n.env.Client.Get(ctx, types.NamespacedName{Name: n.Name}, node); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// ensure creates obj, or leaves the one there (a restarted demo). It looks first: kube-apiserver
// refuses a second Service with a fixed clusterIP for the address, before it sees the name taken.
func ensure(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)); err == nil {
		return nil
	}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, obj)); err != nil {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}
