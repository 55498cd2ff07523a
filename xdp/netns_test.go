package xdp_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// sameName is the interface name both namespaces of twins hold.
const sameName = "xfsame0"

// twins is two namespaces, A and C, each holding an interface named
// sameName, both joined by veth to a hub namespace H: the shape of two
// containers with an eth0 each on one host.
type twins struct {
	h, a, c *testenv.Netns
	va, vc  *testenv.Veth // NameA in H, NameB (sameName) in A or C
}

func newTwins(t *testing.T) *twins {
	t.Helper()
	testenv.RequirePriv(t)
	w := &twins{h: testenv.NewNetns(t), a: testenv.NewNetns(t), c: testenv.NewNetns(t)}
	w.va = testenv.NewVeth(t, w.h, w.a, testenv.VethOptions{NameA: "xfhubA", NameB: sameName,
		AddrA: netip.MustParsePrefix("10.201.1.1/24"), AddrB: netip.MustParsePrefix("10.201.1.2/24")})
	w.vc = testenv.NewVeth(t, w.h, w.c, testenv.VethOptions{NameA: "xfhubC", NameB: sameName,
		AddrA: netip.MustParsePrefix("10.201.2.1/24"), AddrB: netip.MustParsePrefix("10.201.2.2/24")})
	// Runs before the namespaces go: whatever the test did, nothing of
	// xdpfab stays in either.
	t.Cleanup(func() {
		cleanupIn(w.a, sameName)
		cleanupIn(w.c, sameName)
	})
	return w
}

func attachIn(t *testing.T, ns *testenv.Netns, opts xdp.Options) *xdp.Attachment {
	t.Helper()
	var a *xdp.Attachment
	require.NoError(t, ns.Do(func() (err error) { a, err = xdp.Attach(sameName, opts); return err }))
	t.Cleanup(func() { a.Close() })
	return a
}

func openIn(t *testing.T, ns *testenv.Netns) (*xdp.Attachment, error) {
	t.Helper()
	var a *xdp.Attachment
	err := ns.Do(func() (err error) { a, err = xdp.Open(sameName); return err })
	if a != nil {
		t.Cleanup(func() { a.Close() })
	}
	return a, err
}

func statusIn(t *testing.T, ns *testenv.Netns, a *xdp.Attachment) *xdp.Status {
	t.Helper()
	var st *xdp.Status
	require.NoError(t, ns.Do(func() (err error) { st, err = a.Status(); return err }))
	return st
}

func attachedIn(t *testing.T, ns *testenv.Netns) bool {
	t.Helper()
	var ok bool
	require.NoError(t, ns.Do(func() (err error) { ok, err = xdp.Attached(sameName); return err }))
	return ok
}

func openAllIn(t *testing.T, ns *testenv.Netns) []*xdp.Attachment {
	t.Helper()
	var as []*xdp.Attachment
	require.NoError(t, ns.Do(func() (err error) { as, err = xdp.OpenAll(); return err }))
	t.Cleanup(func() {
		for _, a := range as {
			a.Close()
		}
	})
	return as
}

// progOn returns the id of the XDP program netlink reports on sameName in ns.
func progOn(t *testing.T, ns *testenv.Netns) uint32 {
	t.Helper()
	l, err := ns.Netlink().LinkByName(sameName)
	require.NoError(t, err)
	if l.Attrs().Xdp == nil {
		return 0
	}
	return l.Attrs().Xdp.ProgId
}

// TestSameNameNamespaces: two namespaces with an interface of the same
// name each get their own program, pins and maps; attaching, opening,
// reading and detaching in one never sees or touches the other's.
func TestSameNameNamespaces(t *testing.T) {
	w := newTwins(t)
	const portA, portC, avA = 4791, 4792, 7
	a := attachIn(t, w.a, xdp.Options{Mode: xdp.ModeGeneric, Ports: map[uint16]xdp.PortConfig{portA: {AVID: avA, Strict: true}}})
	idA := progID(t, a.Program)
	require.Equal(t, idA, progOn(t, w.a))
	require.Zero(t, progOn(t, w.c), "attaching in A puts nothing in C")

	// C has no xdpfab: Open, Attached and OpenAll there do not find A's.
	_, err := openIn(t, w.c)
	require.ErrorIs(t, err, fi.ENOENT)
	require.True(t, attachedIn(t, w.a))
	require.False(t, attachedIn(t, w.c))
	require.Empty(t, openAllIn(t, w.c))

	// Attach in C loads a program of its own and leaves A's alone.
	c := attachIn(t, w.c, xdp.Options{Mode: xdp.ModeGeneric, Ports: map[uint16]xdp.PortConfig{portC: {AVID: 9}}})
	idC := progID(t, c.Program)
	require.NotEqual(t, idA, idC, "C got a program of its own")
	require.Equal(t, idC, progOn(t, w.c))
	require.Equal(t, idA, progOn(t, w.a), "attach in C did not touch A")
	require.NotEqual(t, statusIn(t, w.a, a).PinDir, statusIn(t, w.c, c).PinDir)

	// Each namespace opens and reads its own.
	oa, err := openIn(t, w.a)
	require.NoError(t, err)
	require.Equal(t, idA, progID(t, oa.Program))
	oc, err := openIn(t, w.c)
	require.NoError(t, err)
	require.Equal(t, idC, progID(t, oc.Program))
	for ns, id := range map[*testenv.Netns]uint32{w.a: idA, w.c: idC} {
		all := openAllIn(t, ns)
		require.Len(t, all, 1, "each namespace lists its own only")
		require.Equal(t, id, progID(t, all[0].Program))
		require.Equal(t, sameName, all[0].Iface)
		require.True(t, attachedIn(t, ns))
	}
	stA, stC := statusIn(t, w.a, oa), statusIn(t, w.c, oc)
	require.Equal(t, []xdp.PortStatus{{Port: xdp.Port{Port: portA, PortConfig: xdp.PortConfig{AVID: avA, Strict: true}}}}, stA.Ports)
	require.Equal(t, []xdp.PortStatus{{Port: xdp.Port{Port: portC, PortConfig: xdp.PortConfig{AVID: 9}}}}, stC.Ports)
	require.Equal(t, idA, stA.ProgramID)
	require.Equal(t, idC, stC.ProgramID)

	// Attaching again in C (idempotent) still leaves A alone.
	c2 := attachIn(t, w.c, xdp.Options{Mode: xdp.ModeAuto})
	require.Equal(t, idC, progID(t, c2.Program))
	require.Equal(t, idA, progOn(t, w.a))

	// Detach in C removes C's program only.
	require.NoError(t, w.c.Do(func() error { return xdp.Detach(sameName) }))
	require.Zero(t, progOn(t, w.c))
	require.Equal(t, idA, progOn(t, w.a), "detach in C did not touch A")
	require.ErrorIs(t, w.c.Do(func() error { return xdp.Detach(sameName) }), fi.ENOENT,
		"a second detach in C finds nothing, in particular not A's")
	require.False(t, attachedIn(t, w.c))
	require.Empty(t, openAllIn(t, w.c))
	require.Len(t, openAllIn(t, w.a), 1)
	require.Equal(t, idA, progOn(t, w.a))
	oa2, err := openIn(t, w.a)
	require.NoError(t, err, "A's pins stay")
	require.Equal(t, idA, progID(t, oa2.Program))
	require.DirExists(t, statusIn(t, w.a, oa2).PinDir)

	// A's program still runs: a datagram to its strict port from a peer
	// outside the AV is dropped in XDP, and ping still answers.
	tx := udpListen(t, w.h, netip.AddrPortFrom(w.va.AddrA.Addr(), 6000))
	rx := udpListen(t, w.a, netip.AddrPortFrom(w.va.AddrB.Addr(), portA))
	require.True(t, ping(t, w.h, w.va.AddrB.Addr(), 5), "ping A while attached")
	before := counters(t, oa2)
	require.False(t, receives(t, tx, rx, netip.AddrPortFrom(w.va.AddrB.Addr(), portA), "stranger", 3))
	after := counters(t, oa2)
	require.Equal(t, uint64(3), after[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER]-before[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER])

	// And A detaches its own.
	require.NoError(t, w.a.Do(func() error { return xdp.Detach(sameName) }))
	require.Zero(t, progOn(t, w.a))
}
