// Package nstest builds real network namespaces for tests: a host with two interfaces wired by
// veth pairs to a second namespace, as root or, for a user without it, inside `unshare -rn`.
package nstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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
