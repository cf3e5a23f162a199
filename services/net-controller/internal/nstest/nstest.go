// Package nstest builds real network namespaces for tests: a host with two interfaces wired by
// veth pairs to a second namespace, as root or, for a user without it, inside `unshare -rn`.
package nstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Main runs a test binary's tests (m.Run) in a user and network namespace of its own when the
// user is not root (a user namespace of one's own gives the capabilities netlink needs), with its
// loopback up; call it from TestMain.
func Main(m interface{ Run() int }) int {
	if os.Getenv("NSTEST_UNSHARED") != "" {
		if lo, err := netlink.LinkByName("lo"); err == nil {
			_ = netlink.LinkSetUp(lo)
		}
		return m.Run()
	}
	if os.Geteuid() == 0 {
		return m.Run()
	}
	cmd := exec.Command("unshare", append([]string{"-rn", os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), "NSTEST_UNSHARED=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if e, ok := err.(*exec.ExitError); ok {
			return e.ExitCode()
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Host is a network namespace with two interfaces, eth1 (10.1.0.2/24, the default route's) and
// eth2 (10.2.0.2/24), each a veth pair whose other end (10.x.0.1) is in a second namespace.
type Host struct {
	NS, Net netns.NsHandle
	H       *netlink.Handle
}

// NewNS makes a network namespace, closed when the test ends.
func NewNS(t testing.TB) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	return ns
}

// NewHost builds a Host.
func NewHost(t testing.TB) *Host {
	t.Helper()
	hs := &Host{NS: NewNS(t), Net: NewNS(t)}
	var err error
	if hs.H, err = netlink.NewHandleAt(hs.NS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hs.H.Close)
	peer, err := netlink.NewHandleAt(hs.Net)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	for i, name := range []string{"eth1", "eth2"} {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "peer" + name[3:], PeerNamespace: netlink.NsFd(int(hs.Net))}
		must(t, hs.H.LinkAdd(veth))
		l, err := hs.H.LinkByName(name)
		must(t, err)
		must(t, hs.H.AddrAdd(l, addr(t, fmt.Sprintf("10.%d.0.2/24", i+1))))
		must(t, hs.H.LinkSetUp(l))
		p, err := peer.LinkByName("peer" + name[3:])
		must(t, err)
		must(t, peer.AddrAdd(p, addr(t, fmt.Sprintf("10.%d.0.1/24", i+1))))
		must(t, peer.LinkSetUp(p))
	}
	lo, err := hs.H.LinkByName("lo")
	must(t, err)
	must(t, hs.H.LinkSetUp(lo))
	eth1, err := hs.H.LinkByName("eth1")
	must(t, err)
	must(t, hs.H.RouteAdd(&netlink.Route{LinkIndex: eth1.Attrs().Index, Gw: net.ParseIP("10.1.0.1")}))
	return hs
}

// OutOf is the interface the kernel sends a packet to dst from src out of
// (`ip route get dst from src`).
func (hs *Host) OutOf(t testing.TB, dst, src string) string {
	t.Helper()
	opts := &netlink.RouteGetOptions{}
	if src != "" {
		opts.SrcAddr = net.ParseIP(src)
	}
	routes, err := hs.H.RouteGetWithOptions(net.ParseIP(dst), opts)
	must(t, err)
	l, err := hs.H.LinkByIndex(routes[0].LinkIndex)
	must(t, err)
	return l.Attrs().Name
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func addr(t testing.TB, s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	must(t, err)
	return a
}

// SendUDP sends one UDP datagram from src to dst:port from inside the host's namespace, as a
// workload replying from src would.
func (hs *Host) SendUDP(t testing.TB, src, dst string, port int) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	must(t, err)
	defer orig.Close()
	must(t, netns.Set(hs.NS))
	defer func() { must(t, netns.Set(orig)) }()
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.ParseIP(dst), Port: port})
	must(t, err)
	defer c.Close()
	_, err = c.Write([]byte("reply"))
	must(t, err)
}

// Received counts the IPv4 packets from src that arrived on one of the network namespace's veth
// ends (peer1 or peer2), read from a packet socket there.
type Received struct {
	mu    sync.Mutex
	count map[string]int
}

// Count is how many packets from src arrived on peer.
func (r *Received) Count(peer string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[peer]
}

// Listen captures, until the test ends, the IPv4 packets from src arriving at the network
// namespace's ends of both veth pairs.
func (hs *Host) Listen(t testing.TB, src string) *Received {
	t.Helper()
	r := &Received{count: map[string]int{}}
	want := net.ParseIP(src).To4()
	for _, peer := range []string{"peer1", "peer2"} {
		fd := packetSocket(t, hs.Net, peer)
		t.Cleanup(func() { _ = unix.Close(fd) })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
						continue
					}
					return // closed
				}
				// An IPv4 header: the source address is at bytes 12-15.
				if n >= 20 && buf[0]>>4 == 4 && net.IP(buf[12:16]).Equal(want) {
					r.mu.Lock()
					r.count[peer]++
					r.mu.Unlock()
				}
			}
		}()
	}
	return r
}

// packetSocket opens a cooked packet socket bound to an interface of namespace ns.
func packetSocket(t testing.TB, ns netns.NsHandle, ifname string) int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	must(t, err)
	defer orig.Close()
	must(t, netns.Set(ns))
	defer func() { must(t, netns.Set(orig)) }()
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, proto)
	must(t, err)
	ifi, err := net.InterfaceByName(ifname)
	must(t, err)
	must(t, unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index}))
	must(t, unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}))
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Path returns a path naming the host's namespace (/proc/<pid>/ns/net of a process kept asleep in
// it until the test ends), for a program given a namespace by path, such as net-agent --netns.
func (hs *Host) Path(t testing.TB) string {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	must(t, err)
	defer orig.Close()
	must(t, netns.Set(hs.NS))
	defer func() { must(t, netns.Set(orig)) }()
	cmd := exec.Command("sleep", "infinity") // forked from this thread: it lives in hs.NS
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
}
