package testenv

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// NodeNetwork is the addressing of a control plane that a real node joins (package node). The node
// lives in network namespaces of its own, joined to the machine by a veth pair; each control plane
// with a node takes a free index, so that the demo and a test can run side by side, each with its
// own link, Service range and pod range, all on this machine:
//
//	10.200.<i>.1  the machine's end of the link: kube-apiserver and the image registry answer there
//	10.200.<i>.2  the node's address
//	10.201.<i>.0/24  Services (10.201.<i>.1 is kubernetes.default, 10.201.<i>.10 the cluster DNS)
//	10.202.<i>.0/24  pods
type NodeNetwork struct {
	Index int
	lock  *os.File // held while the control plane runs: the index is free again when its process ends
}

// Addresses of the network.
func (n NodeNetwork) HostIP() net.IP       { return net.IPv4(10, 200, byte(n.Index), 1) }
func (n NodeNetwork) NodeIP() net.IP       { return net.IPv4(10, 200, byte(n.Index), 2) }
func (n NodeNetwork) ServiceCIDR() string  { return fmt.Sprintf("10.201.%d.0/24", n.Index) }
func (n NodeNetwork) KubernetesIP() net.IP { return net.IPv4(10, 201, byte(n.Index), 1) }
func (n NodeNetwork) DNSIP() net.IP        { return n.ServiceIP(10) }
func (n NodeNetwork) PodCIDR() string      { return fmt.Sprintf("10.202.%d.0/24", n.Index) }
func (n NodeNetwork) HostLink() string     { return fmt.Sprintf("flnode%d", n.Index) }
func (n NodeNetwork) RegistryAddr() string { return net.JoinHostPort(n.HostIP().String(), "5000") }
func (n NodeNetwork) CgroupParent() string { return fmt.Sprintf("/flotilla-node-%d", n.Index) }

// ServiceIP is the i-th address of the Service range; up to 15, kube-apiserver gives it to no
// Service that does not ask for it (the range's static band).
func (n NodeNetwork) ServiceIP(i int) net.IP { return net.IPv4(10, 201, byte(n.Index), byte(i)) }
func (n NodeNetwork) ControlPlaneURL(port string) string {
	return "https://" + net.JoinHostPort(n.HostIP().String(), port)
}

// nodeNetworkLocks is where the indexes in use are locked (flock, released when the holder dies).
const nodeNetworkLocks = "/run/flotilla/node-networks"

// allocateNodeNetwork takes the lowest free index (or want, when not 0).
func allocateNodeNetwork(want int) (*NodeNetwork, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a real node needs root (network namespaces, cgroups, mounts)")
	}
	if err := os.MkdirAll(nodeNetworkLocks, 0o755); err != nil {
		return nil, err
	}
	first, last := 1, 250
	if want != 0 {
		first, last = want, want
	}
	for i := first; i <= last; i++ {
		f, err := os.OpenFile(filepath.Join(nodeNetworkLocks, fmt.Sprint(i)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		return &NodeNetwork{Index: i, lock: f}, nil
	}
	return nil, fmt.Errorf("no free node network between %d and %d (%s)", first, last, nodeNetworkLocks)
}

// configureNodeReach makes kube-apiserver reachable from a node on n: it listens on every address
// (the node dials the machine's end of its link), advertises that address as kubernetes.default's
// endpoint, serves a certificate of a CA of its own that names the link and the Service address
// pods use, takes the node range's Services, authorizes kubelets as nodes, gives pods their
// ServiceAccount tokens, and presents a client certificate to kubelets (which trust that CA).
func configureNodeReach(env *envtest.Environment, n *NodeNetwork, dir string) error {
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = dir
	ca, caKey, err := loadOrMakeCA(dir)
	if err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), n.HostIP(), n.KubernetesIP()},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := writeSigned(dir, "apiserver", serving, ca, caKey); err != nil {
		return err
	}
	client := &x509.Certificate{Subject: pkix.Name{CommonName: KubeletClientUser}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := writeSigned(dir, "apiserver-kubelet-client", client, ca, caKey); err != nil {
		return err
	}
	if err := ensureServiceAccountKey(dir); err != nil {
		return err
	}
	api.SecureServing.CA = pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: ca.Raw})
	args := api.Configure()
	args.Set("bind-address", "0.0.0.0")
	args.Set("advertise-address", n.HostIP().String())
	args.Set("service-cluster-ip-range", n.ServiceCIDR())
	args.Set("authorization-mode", "Node,RBAC")
	args.Disable("disable-admission-plugins") // envtest leaves ServiceAccount out: pods here need their tokens
	// PodNodeSelector: a namespace may keep its pods on some Nodes (the demo keeps the cluster
	// infrastructure's, whose images cannot be had here, on the Nodes it makes by hand).
	args.Set("enable-admission-plugins", "NodeRestriction,PodNodeSelector")
	args.Set("kubelet-client-certificate", filepath.Join(dir, "apiserver-kubelet-client.crt"))
	args.Set("kubelet-client-key", filepath.Join(dir, "apiserver-kubelet-client.key"))
	args.Set("kubelet-preferred-address-types", "InternalIP") // a node's name resolves nowhere here
	return nil
}

// KubeletClientUser is the user kube-apiserver is to kubelets (logs, exec, port-forward).
const KubeletClientUser = "kube-apiserver-kubelet-client"
