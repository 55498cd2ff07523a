package afxdp_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// routed is A and B on two subnets joined by a router namespace R, which
// forwards with the kernel: unlike a veth end running XDP, which takes a
// frame whatever its destination MAC, R drops frames not addressed to it,
// as a NIC's unicast filter or a switch would. So a frame sent to a MAC
// that is no longer there is lost, as on a real network.
//
//	A 10.201.1.1 --ar-- 10.201.1.254 R 10.201.2.254 --rb-- 10.201.2.1 B
type routed struct {
	a, r, b *testenv.Netns
	ar, rb  *testenv.Veth
}

var (
	routedA  = netip.MustParsePrefix("10.201.1.1/24")
	routedRA = netip.MustParsePrefix("10.201.1.254/24")
	routedRB = netip.MustParsePrefix("10.201.2.254/24")
	routedB  = netip.MustParsePrefix("10.201.2.1/24")
)

func newRouted(t *testing.T) *routed {
	n := &routed{a: testenv.NewNetns(t), r: testenv.NewNetns(t), b: testenv.NewNetns(t)}
	n.ar = testenv.NewVeth(t, n.a, n.r, testenv.VethOptions{AddrA: routedA, AddrB: routedRA})
	n.rb = testenv.NewVeth(t, n.r, n.b, testenv.VethOptions{AddrA: routedRB, AddrB: routedB})
	sysctl(t, n.r, "net.ipv4.ip_forward=1")
	// R's end towards A changes its MAC silently (no gratuitous ARP).
	sysctl(t, n.r, "net.ipv4.conf."+n.ar.NameB+".arp_notify=0")
	addRoute(t, n.a, routedB.Masked(), routedRA.Addr(), n.ar.IndexA, false)
	addRoute(t, n.b, routedA.Masked(), routedRB.Addr(), n.rb.IndexB, false)
	return n
}

func sysctl(t *testing.T, ns *testenv.Netns, kv string) {
	t.Helper()
	_, err := ns.Exec("sysctl", "-qw", kv)
	require.NoError(t, err)
}

func addRoute(t *testing.T, ns *testenv.Netns, dst netip.Prefix, gw netip.Addr, ifindex int, replace bool) {
	t.Helper()
	rt := &netlink.Route{Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)},
		Gw: gw.AsSlice(), LinkIndex: ifindex}
	if replace {
		require.NoError(t, ns.Netlink().RouteReplace(rt))
		return
	}
	require.NoError(t, ns.Netlink().RouteAdd(rt))
}

func attachOne(t *testing.T, ns *testenv.Netns, iface string) {
	require.NoError(t, ns.Do(func() error {
		att, err := xdp.Attach(iface, xdp.Options{Mode: xdp.ModeNative})
		if err != nil {
			return err
		}
		return att.Close()
	}))
	t.Cleanup(func() { _ = ns.Do(func() error { return xdp.Detach(iface) }) })
}

// openRouted opens an endpoint at A and one at B over transport kind and
// connects them.
func openRouted(t *testing.T, n *routed, kind fabric.TransportKind) (*side, *side) {
	if kind == fabric.TransportXDP {
		attachOne(t, n.a, n.ar.NameA)
		attachOne(t, n.b, n.rb.NameB)
	}
	var sa, sb *side
	if kind == fabric.TransportXDP {
		sa = openSideAttr(t, n.a, n.ar.NameA, fabric.DomainAttr{Addr: routedA.Addr(), Port: testPort, Transport: kind})
		sb = openSideAttr(t, n.b, n.rb.NameB, fabric.DomainAttr{Addr: routedB.Addr(), Port: testPort, Transport: kind})
	} else {
		sa = openKernelSide(t, n.a, routedA.Addr())
		sb = openKernelSide(t, n.b, routedB.Addr())
	}
	connect(t, sa, sb)
	return sa, sb
}

// openKernelSide is openSideAttr over the kernel UDP socket.
func openKernelSide(t *testing.T, ns *testenv.Netns, addr netip.Addr) *side {
	s := &side{ns: ns, addr: addr}
	require.NoError(t, ns.Do(func() error {
		f, err := fabric.OpenFabric("", nil)
		if err != nil {
			return err
		}
		if s.dom, err = f.Domain(fabric.DomainAttr{Addr: addr, Port: testPort, Transport: fabric.TransportUDP}, nil); err != nil {
			return err
		}
		s.ep, err = s.dom.Endpoint(fabric.EPAttr{}, nil)
		return err
	}))
	var err error
	s.av, err = s.dom.AVOpen(av.Attr{}, nil)
	require.NoError(t, err)
	s.cq, err = s.dom.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	require.NoError(t, s.ep.Bind(s.av, 0))
	require.NoError(t, s.ep.Bind(s.cq, fi.TRANSMIT|fi.RECV))
	require.NoError(t, s.ep.Enable())
	s.region, err = s.dom.MRReg(make([]byte, 8), fi.REMOTE_READ|fi.REMOTE_WRITE, 0, 0xC0DE, 0, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.ep.Close())
		require.NoError(t, s.region.Close())
		require.NoError(t, s.cq.Close())
		require.NoError(t, s.av.Close())
		require.NoError(t, s.dom.Close())
	})
	return s
}

// opBoundMs bounds each operation's wait; the engine itself fails an
// operation whose peer stays silent with FI_ETIMEDOUT after about 2.7 s.
const opBoundMs = 10000

// fetchAdds runs total remote fetch-adds of 1 on B's counter from A,
// calling change just before operation at, and checks that every one
// completes, returning the count before it (each executed exactly once),
// and that the counter ends at total. It returns the slowest operation's
// latency.
func fetchAdds(t *testing.T, sa, sb *side, total, at int, change func()) time.Duration {
	one := binary.LittleEndian.AppendUint64(nil, 1)
	old := make([]byte, 8)
	buf := make([]fabric.CQEntry, 1)
	var slowest time.Duration
	for i := range total {
		if i == at {
			change()
		}
		start := time.Now()
		require.NoError(t, sa.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, sa.peer, 0, sb.region.Key(),
			fatomic.UINT64, fatomic.SUM, nil))
		n, err := sa.cq.SRead(buf, opBoundMs)
		if errors.Is(err, fi.EAVAIL) {
			e, _ := sa.cq.ReadErr(0)
			t.Fatalf("fetch-add %d (change before %d) failed after %v: %v (%+v)", i, at, time.Since(start), e.Err, sa.ep.Stats())
		}
		require.NoError(t, err, "fetch-add %d", i)
		require.Equal(t, 1, n)
		slowest = max(slowest, time.Since(start))
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(old), "fetch-add %d executed once", i)
	}
	back := make([]byte, 8)
	require.NoError(t, sa.ep.Read(back, mr.Desc{}, sa.peer, 0, sb.region.Key(), nil))
	complete(t, sa.cq)
	require.Equal(t, uint64(total), binary.LittleEndian.Uint64(back), "final value")
	return slowest
}

// TestPeerMACChange: the next hop's MAC changes in the middle of a run of
// fetch-adds and nobody announces it. The AF_XDP transport, which builds
// its frames for a cached next hop, learns the new MAC when the reliable
// engine finds the peer silent (datapath.PathChecker), and the kernel
// socket relearns it too: every operation completes, exactly once, well
// before the engine would declare the peer unreachable.
func TestPeerMACChange(t *testing.T) {
	testenv.RequirePriv(t)
	for _, kind := range []fabric.TransportKind{fabric.TransportXDP, fabric.TransportUDP} {
		name := "afxdp"
		if kind == fabric.TransportUDP {
			name = "kernel"
		}
		t.Run(name, func(t *testing.T) {
			n := newRouted(t)
			sa, sb := openRouted(t, n, kind)
			lr, err := n.r.Netlink().LinkByName(n.ar.NameB)
			require.NoError(t, err)
			oldMAC := lr.Attrs().HardwareAddr
			newMAC := net.HardwareAddr{0x02, 0x58, 0x46, 0x00, 0x06, 0x01}
			retx := sa.ep.Stats().Retransmits
			slowest := fetchAdds(t, sa, sb, 300, 100, func() {
				require.NoError(t, n.r.Netlink().LinkSetHardwareAddr(lr, newMAC))
			})
			t.Logf("R's MAC %v -> %v: slowest operation %v, %d retransmissions",
				oldMAC, newMAC, slowest, sa.ep.Stats().Retransmits-retx)
			require.Greater(t, sa.ep.Stats().Retransmits, retx, "the change lost packets")
		})
	}
}

// TestRouteMovesToOtherLink: mid-run, the route to B moves from the link
// the AF_XDP sockets are on to a second link without XDP, and the first
// link goes down. Frames built for the old hop would go out on the dead
// link; the transport follows the route change and sends through the
// kernel socket, which takes the new route.
//
//	A 10.201.1.1 --ar-- R --rb-- B, and A 10.202.1.1 --ar2-- 10.202.1.254 R
func TestRouteMovesToOtherLink(t *testing.T) {
	testenv.RequirePriv(t)
	n := newRouted(t)
	ar2 := testenv.NewVeth(t, n.a, n.r, testenv.VethOptions{AddrA: netip.MustParsePrefix("10.202.1.1/24"),
		AddrB: netip.MustParsePrefix("10.202.1.254/24")})
	for _, ns := range []*testenv.Netns{n.a, n.r} {
		sysctl(t, ns, "net.ipv4.conf.all.rp_filter=0")
	}
	sa, sb := openRouted(t, n, fabric.TransportXDP)
	slowest := fetchAdds(t, sa, sb, 300, 100, func() {
		// R leaves the first link and reaches A's address over the second;
		// A's route to B moves to the second link.
		l, err := n.r.Netlink().LinkByName(n.ar.NameB)
		require.NoError(t, err)
		require.NoError(t, n.r.Netlink().LinkSetDown(l))
		addRoute(t, n.r, netip.PrefixFrom(routedA.Addr(), 32), ar2.AddrA.Addr(), ar2.IndexB, false)
		addRoute(t, n.a, routedB.Masked(), ar2.AddrB.Addr(), ar2.IndexA, true)
	})
	t.Logf("route moved: slowest operation %v", slowest)
}

// TestCloseReleasesResolver: a transport's Close ends its next-hop
// resolver, with a resolution in flight: no goroutine and no descriptor
// (netlink, probe socket) stays behind. (Before, every transport leaked
// its netlink handle.)
func TestCloseReleasesResolver(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	attachOne(t, a, v.NameA)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	open := func() *afxdp.Transport {
		var tr *afxdp.Transport
		require.NoError(t, a.Do(func() error {
			var err error
			tr, err = afxdp.Open(afxdp.Options{Iface: v.NameA, Local: netip.AddrPortFrom(v.AddrA.Addr(), testPort)})
			return err
		}))
		return tr
	}
	// Warm up what a process opens once.
	require.NoError(t, open().Close())
	g0, f0 := runtime.NumGoroutine(), fds()
	for range 5 {
		tr := open()
		// Unresolvable: its resolution is still running at Close.
		require.NoError(t, tr.Send([]datapath.Packet{{Buf: []byte("x"), Addr: netip.AddrPortFrom(v.AddrB.Addr().Next(), testPort)}}))
		tr.CheckPath(netip.AddrPortFrom(v.AddrB.Addr(), testPort))
		require.NoError(t, tr.Close())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 || fds() > f0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines %d (before %d), fds %d (before %d):\n%s",
				runtime.NumGoroutine(), g0, fds(), f0, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
