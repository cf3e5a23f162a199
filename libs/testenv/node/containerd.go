package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// containerdConfig is containerd 2's configuration for the node: its state under the node's
// directory, runc from Debian's packages with cgroupfs (cgroups are v1 here), CNI from
// <Dir>/cni, pod network namespaces under its state directory, and every registry mirrored by the
// node's registry (certs.d/_default): nothing is pulled from anywhere else. Containers' OOM score
// adjustments are kept at or above containerd's own: this machine's root lacks CAP_SYS_RESOURCE,
// without which the kubelet's -998 for a pod's sandbox fails to start it.
const containerdConfig = `version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[5]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[6]q

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[9]q
        SystemdCgroup = false
`

// cniConfig gives each pod an address of the node's pod range on a point-to-point veth: every
// packet between pods is routed by the node, where kube-proxy's rules see it.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "flotilla",
  "plugins": [{
    "type": "ptp",
    "mtu": 1500,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`

// registryHosts sends every pull to the node's registry, over plain HTTP on the node's link.
const registryHosts = `[host."http://%s"]
  capabilities = ["pull", "resolve"]
`

// TrustRegistry lets containerd pull from the registry at host (host:port) over TLS, trusting the
// node CA (testenv.NodeServingCert): a registry mirror a test or the demo serves on the node's link.
// containerd reads it at the next pull.
func (n *Node) TrustRegistry(host string) error {
	dir := filepath.Join(n.Dir, "containerd", "certs.d", host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), fmt.Appendf(nil, "server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n",
		"https://"+host, "https://"+host, testenv.NodeCAFile(n.env.ControlPlane.APIServer.CertDir)), 0o644)
}

// socket is containerd's CRI endpoint.
func (n *Node) socket() string { return filepath.Join(n.Dir, "containerd", "containerd.sock") }

func (n *Node) startContainerd(bin string) error {
	dir := filepath.Join(n.Dir, "containerd")
	hosts := filepath.Join(dir, "certs.d", "_default")
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		filepath.Join(hosts, "hosts.toml"):                           fmt.Sprintf(registryHosts, n.Registry),
		filepath.Join(n.Dir, "cni", "net.d", "10-flotilla.conflist"): fmt.Sprintf(cniConfig, n.Net.PodCIDR(), filepath.Join(n.Dir, "cni", "ipam")),
		filepath.Join(dir, "config.toml"): fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"),
			n.socket(), filepath.Join(dir, "ttrpc.sock"), n.Images["pause"], filepath.Join(dir, "certs.d"),
			filepath.Join(n.Dir, "cni", "bin"), filepath.Join(n.Dir, "cni", "net.d"), filepath.Join(n.Dir, "bin", "runc")),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := n.inNode("containerd", filepath.Join(bin, "containerd"), n.processEnv(bin), "--config", filepath.Join(dir, "config.toml")); err != nil {
		return err
	}
	return waitFor(context.Background(), "containerd", filepath.Join(n.Dir, "logs", "containerd.log"), time.Minute, func(context.Context) (bool, error) {
		c, err := net.Dial("unix", n.socket())
		if err != nil {
			return false, nil
		}
		return true, c.Close()
	})
}
