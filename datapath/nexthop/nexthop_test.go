package nexthop_test

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpfab/xdpfab/datapath/nexthop"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// follow bounds how long the cache may take to follow a change the kernel
// has made or learned.
const follow = 3 * time.Second

// newResolver opens a resolver in ns and closes it when the test ends.
func newResolver(t *testing.T, ns *testenv.Netns, opts nexthop.Options) *nexthop.Resolver {
	t.Helper()
	var r *nexthop.Resolver
	require.NoError(t, ns.Do(func() error {
		var err error
		r, err = nexthop.New(opts)
		return err
	}))
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

// TestResolveOverVeth resolves the peer of a fresh veth pair, whose
// neighbour table starts empty, so the probe path runs. The lookups run
// outside the namespace: the resolver is bound to the one it was made in.
func TestResolveOverVeth(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{MTU: 3000})
	lb, err := b.Netlink().LinkByName(v.NameB)
	require.NoError(t, err)
	la, err := a.Netlink().LinkByName(v.NameA)
	require.NoError(t, err)

	r := newResolver(t, a, nexthop.Options{Timeout: 2 * time.Second})
	hop, err := r.Lookup(v.AddrB.Addr())
	require.NoError(t, err)
	require.Equal(t, v.IndexA, hop.Ifindex)
	require.Equal(t, v.AddrA.Addr(), hop.Src)
	require.Equal(t, la.Attrs().HardwareAddr, hop.SrcMAC)
	require.Equal(t, v.AddrB.Addr(), hop.Next)
	require.Equal(t, lb.Attrs().HardwareAddr, hop.DstMAC)
	require.Equal(t, 3000, hop.MTU)

	// An address with no host behind it never resolves: a bounded error.
	r2 := newResolver(t, a, nexthop.Options{Timeout: 200 * time.Millisecond})
	_, err = r2.Lookup(v.AddrB.Addr().Next())
	require.ErrorIs(t, err, nexthop.ErrUnresolved)

	// Try does not block: it starts the resolution and a later Try finds it.
	other := newResolver(t, a, nexthop.Options{})
	_, ok := other.Try(v.AddrB.Addr())
	require.False(t, ok)
	require.Eventually(t, func() bool { _, ok := other.Try(v.AddrB.Addr()); return ok }, follow, time.Millisecond)
}

// setMAC gives ns's link a new locally administered MAC and returns it.
func setMAC(t *testing.T, ns *testenv.Netns, name string, last byte) net.HardwareAddr {
	t.Helper()
	l, err := ns.Netlink().LinkByName(name)
	require.NoError(t, err)
	mac := net.HardwareAddr{0x02, 0x58, 0x46, 0x00, 0x07, last}
	require.NoError(t, ns.Netlink().LinkSetHardwareAddr(l, mac))
	return mac
}

func sysctl(t *testing.T, ns *testenv.Netns, kv string) {
	t.Helper()
	_, err := ns.Exec("sysctl", "-qw", kv)
	require.NoError(t, err)
}

// TestFollowsAnnouncedMAC: a peer that announces its new MAC (gratuitous
// ARP, arp_notify) updates the kernel's neighbour entry, and the cached hop
// follows it without anyone asking.
func TestFollowsAnnouncedMAC(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	r := newResolver(t, a, nexthop.Options{})
	_, err := r.Lookup(v.AddrB.Addr())
	require.NoError(t, err)

	sysctl(t, b, "net.ipv4.conf."+v.NameB+".arp_notify=1")
	mac := setMAC(t, b, v.NameB, 1)
	require.Eventually(t, func() bool {
		h, ok := r.Cached(v.AddrB.Addr())
		return ok && h.DstMAC.String() == mac.String()
	}, follow, time.Millisecond, "the hop follows the announced MAC")
}

// TestRecheckLearnsSilentMAC: a peer that changes its MAC silently is not
// noticed by the kernel (it does not send through that neighbour); Recheck
// makes it verify the neighbour and the hop gets the new MAC.
func TestRecheckLearnsSilentMAC(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	r := newResolver(t, a, nexthop.Options{})
	old, err := r.Lookup(v.AddrB.Addr())
	require.NoError(t, err)

	sysctl(t, b, "net.ipv4.conf."+v.NameB+".arp_notify=0")
	mac := setMAC(t, b, v.NameB, 2)
	time.Sleep(50 * time.Millisecond)
	h, ok := r.Cached(v.AddrB.Addr())
	require.True(t, ok)
	require.Equal(t, old.DstMAC, h.DstMAC, "nothing told the kernel")

	r.Recheck(v.AddrB.Addr())
	require.Eventually(t, func() bool {
		h, ok := r.Cached(v.AddrB.Addr())
		return ok && h.DstMAC.String() == mac.String()
	}, follow, time.Millisecond, "Recheck learns the new MAC")

	// A permanent neighbour entry is the administrator's: Recheck leaves it.
	la, err := a.Netlink().LinkByName(v.NameA)
	require.NoError(t, err)
	pinned := net.HardwareAddr{0x02, 0x58, 0x46, 0x00, 0x07, 0x99}
	require.NoError(t, a.Netlink().NeighSet(&netlink.Neigh{LinkIndex: la.Attrs().Index, Family: netlink.FAMILY_V4,
		State: netlink.NUD_PERMANENT, IP: v.AddrB.Addr().AsSlice(), HardwareAddr: pinned}))
	r3 := newResolver(t, a, nexthop.Options{RecheckInterval: time.Millisecond})
	h, err = r3.Lookup(v.AddrB.Addr())
	require.NoError(t, err)
	require.Equal(t, pinned, h.DstMAC)
	r3.Recheck(v.AddrB.Addr())
	require.Eventually(t, func() bool { _, ok := r3.Cached(v.AddrB.Addr()); return ok }, follow, time.Millisecond)
	neighs, err := a.Netlink().NeighList(la.Attrs().Index, netlink.FAMILY_V4)
	require.NoError(t, err)
	found := false
	for _, n := range neighs {
		if n.IP.Equal(v.AddrB.Addr().AsSlice()) {
			found = true
			require.Equal(t, netlink.NUD_PERMANENT, n.State)
			require.Equal(t, pinned, n.HardwareAddr)
		}
	}
	require.True(t, found, "the permanent entry stays")
}

// TestFollowsRouteAndLink: a route that moves to another interface and a
// link whose MTU changes drop the hops they concern; the next lookup
// answers from the new state.
func TestFollowsRouteAndLink(t *testing.T) {
	testenv.RequirePriv(t)
	a, b, c := testenv.NewNetns(t), testenv.NewNetns(t), testenv.NewNetns(t)
	vb := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	vc := testenv.NewVeth(t, a, c, testenv.VethOptions{AddrA: netip.MustParsePrefix("10.210.0.1/24"),
		AddrB: netip.MustParsePrefix("10.210.0.2/24")})
	far := netip.MustParseAddr("10.99.0.1")
	dst := &net.IPNet{IP: far.AsSlice(), Mask: net.CIDRMask(32, 32)}
	require.NoError(t, a.Netlink().RouteAdd(&netlink.Route{Dst: dst, Gw: vb.AddrB.Addr().AsSlice(), LinkIndex: vb.IndexA}))

	r := newResolver(t, a, nexthop.Options{})
	h, err := r.Lookup(far)
	require.NoError(t, err)
	require.Equal(t, vb.IndexA, h.Ifindex)
	require.Equal(t, vb.AddrB.Addr(), h.Next)

	require.NoError(t, a.Netlink().RouteReplace(&netlink.Route{Dst: dst, Gw: vc.AddrB.Addr().AsSlice(), LinkIndex: vc.IndexA}))
	require.Eventually(t, func() bool { _, ok := r.Cached(far); return !ok }, follow, time.Millisecond,
		"a route change drops the hop")
	h, err = r.Lookup(far)
	require.NoError(t, err)
	require.Equal(t, vc.IndexA, h.Ifindex)
	require.Equal(t, vc.AddrB.Addr(), h.Next)

	lc, err := a.Netlink().LinkByIndex(vc.IndexA)
	require.NoError(t, err)
	require.NoError(t, a.Netlink().LinkSetMTU(lc, 1400))
	require.Eventually(t, func() bool { _, ok := r.Cached(far); return !ok }, follow, time.Millisecond,
		"an MTU change drops the hop")
	h, err = r.Lookup(far)
	require.NoError(t, err)
	require.Equal(t, 1400, h.MTU)
}

// TestCloseLeavesNothing: resolvers closed with resolutions in flight
// leave no goroutine and no file descriptor behind.
func TestCloseLeavesNothing(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	// Warm up what is opened once per process.
	warm := newResolver(t, a, nexthop.Options{})
	_, err := warm.Lookup(v.AddrB.Addr())
	require.NoError(t, err)
	require.NoError(t, warm.Close())
	g0, f0 := runtime.NumGoroutine(), fds()
	for i := range 10 {
		var r *nexthop.Resolver
		require.NoError(t, a.Do(func() error {
			var err error
			r, err = nexthop.New(nexthop.Options{Timeout: time.Second})
			return err
		}))
		_, _ = r.Try(v.AddrB.Addr().Next()) // never resolves: in flight at Close
		r.Recheck(v.AddrB.Addr())
		if i%2 == 0 {
			_, err := r.Lookup(v.AddrB.Addr())
			require.NoError(t, err)
		}
		start := time.Now()
		require.NoError(t, r.Close())
		require.Less(t, time.Since(start), 500*time.Millisecond, "Close ends resolutions at once")
		_, err := r.Lookup(v.AddrB.Addr())
		require.ErrorIs(t, err, nexthop.ErrClosed)
	}
	// Polled here: require.Eventually runs its condition on a goroutine
	// of its own.
	deadline := time.Now().Add(follow)
	for runtime.NumGoroutine() > g0 || fds() > f0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines %d (before %d), fds %d (before %d):\n%s",
				runtime.NumGoroutine(), g0, fds(), f0, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
