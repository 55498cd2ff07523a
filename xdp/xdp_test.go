package xdp_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

var modes = []xdp.Mode{xdp.ModeNative, xdp.ModeGeneric}

// pair is two namespaces joined by veth; xdpfab goes on end B.
type pair struct {
	a, b *testenv.Netns
	v    *testenv.Veth
}

func newPair(t *testing.T) *pair {
	t.Helper()
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	p := &pair{a: a, b: b, v: testenv.NewVeth(t, a, b, testenv.VethOptions{})}
	// Registered after the namespaces, so it runs before they go: detach
	// and remove the pins whatever the test did.
	t.Cleanup(func() { cleanupIn(b, p.v.NameB) })
	return p
}

// cleanupIn detaches xdpfab from iface in ns and removes its pins, whatever
// a test did.
func cleanupIn(ns *testenv.Netns, iface string) {
	_ = ns.Do(func() error {
		dir := xdp.PinDir(iface)
		_ = xdp.Detach(iface)
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil
	})
}

// pinDir is B's pin directory.
func (p *pair) pinDir(t *testing.T) string {
	t.Helper()
	var dir string
	require.NoError(t, p.b.Do(func() error { dir = xdp.PinDir(p.v.NameB); return nil }))
	require.NotEmpty(t, dir)
	return dir
}

// attach runs xdp.Attach inside B.
func (p *pair) attach(opts xdp.Options) (*xdp.Attachment, error) {
	var a *xdp.Attachment
	err := p.b.Do(func() error {
		var err error
		a, err = xdp.Attach(p.v.NameB, opts)
		return err
	})
	return a, err
}

func (p *pair) mustAttach(t *testing.T, opts xdp.Options) *xdp.Attachment {
	t.Helper()
	a, err := p.attach(opts)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

func (p *pair) open(t *testing.T) (*xdp.Attachment, error) {
	var a *xdp.Attachment
	err := p.b.Do(func() error {
		var err error
		a, err = xdp.Open(p.v.NameB)
		return err
	})
	if a != nil {
		t.Cleanup(func() { a.Close() })
	}
	return a, err
}

func (p *pair) detach() error {
	return p.b.Do(func() error { return xdp.Detach(p.v.NameB) })
}

// linkXDP returns B's XDP attachment as netlink reports it.
func (p *pair) linkXDP(t *testing.T) *netlink.LinkXdp {
	t.Helper()
	l, err := p.b.Netlink().LinkByName(p.v.NameB)
	require.NoError(t, err)
	if l.Attrs().Xdp == nil {
		return &netlink.LinkXdp{}
	}
	return l.Attrs().Xdp
}

func progID(t *testing.T, prog *ebpf.Program) uint32 {
	t.Helper()
	info, err := prog.Info()
	require.NoError(t, err)
	id, ok := info.ID()
	require.True(t, ok)
	return uint32(id)
}

func TestAttachDetach(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t)
			a := p.mustAttach(t, xdp.Options{Mode: mode, Ports: map[uint16]xdp.PortConfig{4791: {AVID: 1, DomainID: 2, Strict: true}}})
			id := progID(t, a.Program)

			x := p.linkXDP(t)
			require.Equal(t, id, x.ProgId, "the attached program is ours")
			wantAttach := map[xdp.Mode]uint32{xdp.ModeNative: 1, xdp.ModeGeneric: 2}[mode]
			require.Equal(t, wantAttach, x.AttachMode)
			for _, pin := range []string{"link", "prog", bpf.XdpfabMapAvMap, bpf.XdpfabMapMrMap, bpf.XdpfabMapPorts, bpf.XdpfabMapXsks, bpf.XdpfabMapCounters} {
				require.FileExists(t, filepath.Join(p.pinDir(t), pin))
			}

			var st *xdp.Status
			require.NoError(t, p.b.Do(func() (err error) { st, err = a.Status(); return }))
			require.Equal(t, mode.String(), st.Mode)
			require.Equal(t, id, st.ProgramID)
			require.NotZero(t, st.LinkID)
			require.Equal(t, []xdp.PortStatus{{Port: xdp.Port{Port: 4791, PortConfig: xdp.PortConfig{AVID: 1, DomainID: 2, Strict: true}}}}, st.Ports)
			require.Zero(t, st.AVEntries)
			require.Empty(t, st.BoundQueues)

			// The attaching process's handles can go: the pins hold it.
			require.NoError(t, a.Close())
			require.Equal(t, id, p.linkXDP(t).ProgId)

			// Idempotent: attaching again (auto or the same mode) reuses
			// the program and only adds the ports.
			for _, again := range []xdp.Mode{xdp.ModeAuto, mode} {
				a2 := p.mustAttach(t, xdp.Options{Mode: again, Ports: map[uint16]xdp.PortConfig{4792: {AVID: 1}}})
				require.Equal(t, id, progID(t, a2.Program))
				ports, err := a2.Ports()
				require.NoError(t, err)
				require.Len(t, ports, 2)
			}
			// ... but not in the other mode.
			other := xdp.ModeGeneric
			if mode == xdp.ModeGeneric {
				other = xdp.ModeNative
			}
			_, err := p.attach(xdp.Options{Mode: other})
			require.ErrorIs(t, err, fi.EBUSY)
			require.ErrorContains(t, err, "already attached in "+mode.String())

			// Another process finds it.
			o, err := p.open(t)
			require.NoError(t, err)
			require.Equal(t, id, progID(t, o.Program))
			require.NoError(t, o.DeletePort(4792))
			require.ErrorIs(t, o.DeletePort(4792), fi.ENOENT)

			require.NoError(t, p.detach())
			require.Zero(t, p.linkXDP(t).ProgId, "no XDP program left on the link")
			require.NoDirExists(t, p.pinDir(t))
			require.NoDirExists(t, filepath.Dir(p.pinDir(t)), "the namespace's pin directory left behind empty")
			if left, err := os.ReadDir(bpffs.Dir); err == nil {
				require.NotEmpty(t, left, "an empty %s left behind", bpffs.Dir)
			}
			require.ErrorIs(t, p.detach(), fi.ENOENT)
			_, err = p.open(t)
			require.ErrorIs(t, err, fi.ENOENT)

			// And it can be attached again afterwards.
			a3 := p.mustAttach(t, xdp.Options{Mode: mode})
			require.NotEqual(t, id, progID(t, a3.Program))
		})
	}
}

func TestAttachErrors(t *testing.T) {
	p := newPair(t)
	var err error
	require.NoError(t, p.b.Do(func() error {
		_, err = xdp.Attach("xfnosuch0", xdp.Options{})
		return nil
	}))
	require.ErrorIs(t, err, fi.ENODEV)
	require.ErrorContains(t, err, `no such interface "xfnosuch0"`)

	_, err = p.attach(xdp.Options{Mode: xdp.Mode(9)})
	require.ErrorIs(t, err, fi.EINVAL)
	for _, name := range []string{"", "../etc", "a/b"} {
		require.NoError(t, p.b.Do(func() error {
			_, err = xdp.Attach(name, xdp.Options{})
			return nil
		}))
		require.ErrorIs(t, err, fi.EINVAL, "name %q", name)
	}
	_, err = xdp.ParseMode("turbo")
	require.ErrorIs(t, err, fi.EINVAL)
	require.ErrorIs(t, p.detach(), fi.ENOENT)

	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric})
	require.ErrorIs(t, a.SetPort(0, xdp.PortConfig{}), fi.EINVAL)
	require.ErrorIs(t, a.SetXSK(bpf.XSKMaxQueues, 3), fi.EINVAL)
	require.NoError(t, a.DeleteXSK(0), "an empty slot is not an error")
	require.ErrorIs(t, a.DeleteXSK(bpf.XSKMaxQueues), fi.EINVAL)
}

// trivialXDP loads a program returning XDP_PASS, named name.
func trivialXDP(t *testing.T, name string) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { prog.Close() })
	return prog
}

// netlinkAttach attaches prog to B through netlink (outliving its fd, as a
// crashed process's attachment does).
func (p *pair) netlinkAttach(t *testing.T, prog *ebpf.Program, generic bool) {
	t.Helper()
	l, err := p.b.Netlink().LinkByName(p.v.NameB)
	require.NoError(t, err)
	flags := 1 << 2 // XDP_FLAGS_DRV_MODE
	if generic {
		flags = 1 << 1
	}
	require.NoError(t, p.b.Do(func() error { return netlink.LinkSetXdpFdWithFlags(l, prog.FD(), flags) }))
	t.Cleanup(func() {
		if l, err := p.b.Netlink().LinkByName(p.v.NameB); err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.ProgId == progID(t, prog) {
			_ = p.b.Do(func() error { return netlink.LinkSetXdpFdWithFlags(l, -1, flags) })
		}
	})
}

func TestAttachBlockedByOtherProgram(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t)
			other := trivialXDP(t, "other_xdp")
			p.netlinkAttach(t, other, mode == xdp.ModeGeneric)
			id := progID(t, other)

			_, err := p.attach(xdp.Options{Mode: xdp.ModeAuto})
			require.ErrorIs(t, err, fi.EBUSY)
			require.ErrorContains(t, err, fmt.Sprintf(`XDP program "other_xdp" (id %d)`, id))
			require.NoDirExists(t, p.pinDir(t), "a failed attach leaves no pins")

			// Detach does not touch a program that is not ours.
			require.ErrorIs(t, p.detach(), fi.ENOENT)
			require.Equal(t, id, p.linkXDP(t).ProgId)
		})
	}
}

// TestStaleLeftovers: what a crash can leave behind is cleaned up by the
// next attach and by detach.
func TestStaleLeftovers(t *testing.T) {
	p := newPair(t)
	loadStale := func() *ebpf.Program {
		var objs bpf.XdpfabObjects
		spec, err := bpf.LoadXdpfab()
		require.NoError(t, err)
		spec.Maps[bpf.XdpfabMapAvMap].MaxEntries = 16
		spec.Maps[bpf.XdpfabMapMrMap].MaxEntries = 1 + 2
		require.NoError(t, spec.LoadAndAssign(&objs, nil))
		t.Cleanup(func() { objs.Close() })
		return objs.XdpfabXdp
	}

	t.Run("netlink attachment, attach", func(t *testing.T) {
		stale := loadStale()
		p.netlinkAttach(t, stale, false)
		a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeNative})
		require.NotEqual(t, progID(t, stale), progID(t, a.Program))
		require.Equal(t, progID(t, a.Program), p.linkXDP(t).ProgId)
		require.NoError(t, p.detach())
		require.Zero(t, p.linkXDP(t).ProgId)
	})
	t.Run("netlink attachment, detach", func(t *testing.T) {
		stale := loadStale()
		p.netlinkAttach(t, stale, true)
		require.NoError(t, p.detach())
		require.Zero(t, p.linkXDP(t).ProgId)
	})
	t.Run("unpinned bpf_link held by another process", func(t *testing.T) {
		stale := loadStale()
		var l link.Link
		require.NoError(t, p.b.Do(func() (err error) {
			l, err = link.AttachXDP(link.XDPOptions{Program: stale, Interface: p.v.IndexB, Flags: link.XDPGenericMode})
			return err
		}))
		_, err := p.attach(xdp.Options{})
		require.ErrorIs(t, err, fi.EBUSY)
		require.ErrorContains(t, err, "did not pin")
		require.ErrorIs(t, p.detach(), fi.EBUSY, "detach cannot remove another process's link")
		require.Equal(t, progID(t, stale), p.linkXDP(t).ProgId)
		require.NoError(t, l.Close())
		require.Zero(t, p.linkXDP(t).ProgId)
	})
	t.Run("pins without a live link", func(t *testing.T) {
		a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric})
		old := progID(t, a.Program)
		l, err := link.LoadPinnedLink(filepath.Join(p.pinDir(t), "link"), nil)
		require.NoError(t, err)
		require.NoError(t, l.Detach()) // the link is defunct, its pins stay
		l.Close()
		require.Zero(t, p.linkXDP(t).ProgId)
		_, err = p.open(t)
		require.ErrorIs(t, err, fi.ENOENT)

		a2 := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric})
		require.NotEqual(t, old, progID(t, a2.Program))
		require.Equal(t, progID(t, a2.Program), p.linkXDP(t).ProgId)
		require.NoError(t, p.detach())
		require.NoDirExists(t, p.pinDir(t))
	})
}

// udpListen opens a UDP socket in ns on addr.
func udpListen(t *testing.T, ns *testenv.Netns, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	require.NoError(t, ns.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	}))
	t.Cleanup(func() { c.Close() })
	return c
}

// receives sends msg from tx to dst up to tries times and reports whether
// rx got it (the first datagrams may wait on ARP).
func receives(t *testing.T, tx, rx *net.UDPConn, dst netip.AddrPort, msg string, tries int) bool {
	t.Helper()
	buf := make([]byte, 2048)
	for i := 0; i < tries; i++ {
		_, err := tx.WriteToUDPAddrPort([]byte(msg), dst)
		require.NoError(t, err)
		require.NoError(t, rx.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
		for {
			n, err := rx.Read(buf)
			if err != nil {
				break
			}
			if string(buf[:n]) == msg {
				return true
			}
		}
	}
	return false
}

// ping sends ICMP echo requests from ns to dst and reports whether one was
// answered.
func ping(t *testing.T, ns *testenv.Netns, dst netip.Addr, tries int) bool {
	t.Helper()
	var c net.PacketConn
	require.NoError(t, ns.Do(func() (err error) {
		c, err = net.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}))
	defer c.Close()
	buf := make([]byte, 1500)
	for seq := 1; seq <= tries; seq++ {
		echo := []byte{8, 0, 0, 0, 0x12, 0x34, 0, byte(seq), 'x', 'd', 'p', 'f'}
		cs := icmpChecksum(echo)
		echo[2], echo[3] = byte(cs>>8), byte(cs)
		_, err := c.WriteTo(echo, &net.IPAddr{IP: dst.AsSlice()})
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			if n >= 8 && buf[0] == 0 && buf[4] == 0x12 && buf[5] == 0x34 && from.String() == dst.String() {
				return true
			}
		}
	}
	return false
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func counters(t *testing.T, a *xdp.Attachment) xdp.Counters {
	t.Helper()
	c, err := a.Counters()
	require.NoError(t, err)
	return c
}

// TestTraffic: while attached, ICMP and other UDP still reach the stack; a
// datagram to a strict xdpfab port from a peer outside the AV is dropped in
// XDP, one from a peer in the AV passes to the stack (no XSK bound).
func TestTraffic(t *testing.T) {
	const (
		xdpfabPort = 4791
		otherPort  = 5555
		peerPort   = 6000
		avID       = 7
	)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t)
			a := p.mustAttach(t, xdp.Options{Mode: mode, Ports: map[uint16]xdp.PortConfig{xdpfabPort: {AVID: avID, Strict: true}}})
			addrA, addrB := p.v.AddrA.Addr(), p.v.AddrB.Addr()
			// Full UDP checksums from A, as over a NIC (see SetTxChecksum).
			require.NoError(t, p.a.SetTxChecksum(p.v.NameA, false))

			require.True(t, ping(t, p.a, addrB, 5), "ping B while attached")

			tx := udpListen(t, p.a, netip.AddrPortFrom(addrA, peerPort))
			rxOther := udpListen(t, p.b, netip.AddrPortFrom(addrB, otherPort))
			rxFab := udpListen(t, p.b, netip.AddrPortFrom(addrB, xdpfabPort))

			before := counters(t, a)
			require.True(t, receives(t, tx, rxOther, netip.AddrPortFrom(addrB, otherPort), "other udp", 10))
			mid := counters(t, a)
			require.Greater(t, mid[bpf.XdpfabXdpfabCounterCNT_PASS_OTHER_PORT], before[bpf.XdpfabXdpfabCounterCNT_PASS_OTHER_PORT])

			// Unknown peer, strict port: dropped in XDP, never seen by the socket.
			require.False(t, receives(t, tx, rxFab, netip.AddrPortFrom(addrB, xdpfabPort), "stranger", 3))
			after := counters(t, a)
			require.Equal(t, uint64(3), after[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER]-mid[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER])

			// In the AV: passes (no XSK bound) and the socket receives it.
			tm, err := av.NewTableMirror(a.AVMap, avID, 1)
			require.NoError(t, err)
			t.Cleanup(func() { tm.Drop() })
			_, err = tm.Update([]bpf.XdpfabAvKey{{AvId: avID, Port: htons(peerPort), Addr: addrA.As16()}},
				[]bpf.XdpfabAvValue{{FiAddr: 1}})
			require.NoError(t, err)
			require.True(t, receives(t, tx, rxFab, netip.AddrPortFrom(addrB, xdpfabPort), "known peer", 5))
			final := counters(t, a)
			require.Positive(t, final[bpf.XdpfabXdpfabCounterCNT_PEER_KNOWN]-after[bpf.XdpfabXdpfabCounterCNT_PEER_KNOWN])
			require.Positive(t, final[bpf.XdpfabXdpfabCounterCNT_PASS_NO_XSK]-after[bpf.XdpfabXdpfabCounterCNT_PASS_NO_XSK])
			require.Equal(t, after[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER], final[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER])

			var st *xdp.Status
			require.NoError(t, p.b.Do(func() (err error) { st, err = a.Status(); return }))
			require.Equal(t, 1, st.AVEntries)

			// Detached, the stranger's datagrams reach the socket again.
			require.NoError(t, p.detach())
			require.True(t, receives(t, tx, rxFab, netip.AddrPortFrom(addrB, xdpfabPort), "after detach", 5))
			require.True(t, ping(t, p.a, addrB, 5), "ping B after detach")
		})
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestSharedMaps attaches with the AV and MR maps of the av and mr
// packages (here: maps made from the same specs, smaller): the program
// uses them, and they are pinned in PinDir too without moving the owner's
// pin.
func TestSharedMaps(t *testing.T) {
	p := newPair(t)
	spec, err := bpf.LoadXdpfab()
	require.NoError(t, err)
	shared := map[string]*ebpf.Map{}
	for name, n := range map[string]uint32{bpf.XdpfabMapAvMap: 128, bpf.XdpfabMapMrMap: 1 + 16} {
		ms := spec.Maps[name].Copy()
		ms.MaxEntries = n
		m, err := ebpf.NewMap(ms)
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		shared[name] = m
	}

	// The owner (the av package) has its own pin; attaching must not move it.
	ownerDir, err := bpffs.Ensure(bpffs.Path(fmt.Sprintf("xdptest-%d", os.Getpid())))
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(ownerDir) })
	ownerPin := filepath.Join(ownerDir, "av")
	require.NoError(t, shared[bpf.XdpfabMapAvMap].Pin(ownerPin))

	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric, AVMap: shared[bpf.XdpfabMapAvMap], MRMap: shared[bpf.XdpfabMapMrMap]})
	require.FileExists(t, ownerPin)
	require.FileExists(t, filepath.Join(p.pinDir(t), bpf.XdpfabMapAvMap))
	mapID := func(m *ebpf.Map) ebpf.MapID {
		info, err := m.Info()
		require.NoError(t, err)
		id, _ := info.ID()
		return id
	}
	require.Equal(t, mapID(shared[bpf.XdpfabMapAvMap]), mapID(a.AVMap))
	require.Equal(t, mapID(shared[bpf.XdpfabMapMrMap]), mapID(a.MRMap))
	o, err := p.open(t)
	require.NoError(t, err)
	require.Equal(t, mapID(shared[bpf.XdpfabMapAvMap]), mapID(o.AVMap), "pinned in PinDir")
	require.Equal(t, uint32(128), o.AVMap.MaxEntries())

	// A map of the wrong layout is refused.
	require.NoError(t, p.detach())
	wrong, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 4})
	require.NoError(t, err)
	t.Cleanup(func() { wrong.Close() })
	_, err = p.attach(xdp.Options{Mode: xdp.ModeGeneric, AVMap: wrong})
	require.ErrorIs(t, err, fi.EINVAL)
	require.Zero(t, p.linkXDP(t).ProgId)
}

// TestNativeUnsupported: veth cannot run native XDP with an MTU above a
// page's worth; native mode fails with a clear error, auto falls back to
// generic.
func TestNativeUnsupported(t *testing.T) {
	testenv.RequirePriv(t)
	na, nb := testenv.NewNetns(t), testenv.NewNetns(t)
	p := &pair{a: na, b: nb, v: testenv.NewVeth(t, na, nb, testenv.VethOptions{MTU: 4000})}
	t.Cleanup(func() { cleanupIn(nb, p.v.NameB) })
	_, err := p.attach(xdp.Options{Mode: xdp.ModeNative})
	require.ErrorIs(t, err, fi.EOPNOTSUPP)
	require.ErrorContains(t, err, "native")
	require.NoDirExists(t, p.pinDir(t))

	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeAuto})
	var st *xdp.Status
	require.NoError(t, nb.Do(func() (err error) { st, err = a.Status(); return }))
	require.Equal(t, "generic", st.Mode)
}

// TestDetachGoneInterface: pins of an interface that no longer exists
// (deleted, or gone with its namespace) hold a program attached to
// nothing; the next Attach or Detach, in any namespace, removes them.
// Detach by the gone name finds no interface and changes nothing.
func TestDetachGoneInterface(t *testing.T) {
	p := newPair(t)
	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeNative})
	dir := a.PinDir
	require.DirExists(t, dir)
	l, err := p.b.Netlink().LinkByName(p.v.NameB)
	require.NoError(t, err)
	require.NoError(t, p.b.Netlink().LinkDel(l))
	require.ErrorIs(t, p.detach(), fi.ENODEV)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		// Any Attach or Detach on the host sweeps the pins of gone
		// interfaces (other test packages attach in parallel): the sweep
		// this test is about happened, by another process, after Detach
		// by the gone name had left them alone.
		t.Logf("%s swept by another process's attach meanwhile", dir)
		return
	}

	// An attach in the other namespace (the veth went with its end in
	// B: on A's loopback) sweeps them.
	t.Cleanup(func() { cleanupIn(p.a, "lo") })
	var o *xdp.Attachment
	require.NoError(t, p.a.Do(func() (err error) { o, err = xdp.Attach("lo", xdp.Options{Mode: xdp.ModeGeneric}); return }))
	o.Close()
	require.NoDirExists(t, dir)
	require.NoError(t, p.a.Do(func() error { return xdp.Detach("lo") }))
}

// TestConcurrentAttach: attaches racing on one interface all succeed and
// share one program.
func TestConcurrentAttach(t *testing.T) {
	p := newPair(t)
	const n = 4
	ids := make([]uint32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := p.attach(xdp.Options{Mode: xdp.ModeAuto, Ports: map[uint16]xdp.PortConfig{uint16(4800 + i): {}}})
			if err != nil {
				errs[i] = err
				return
			}
			defer a.Close()
			info, err := a.Program.Info()
			if err != nil {
				errs[i] = err
				return
			}
			id, _ := info.ID()
			ids[i] = uint32(id)
		}()
	}
	wg.Wait() // before any assertion: no attach may outlive the test's cleanup
	for i := range errs {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, ids[0], p.linkXDP(t).ProgId)
	o, err := p.open(t)
	require.NoError(t, err)
	ports, err := o.Ports()
	require.NoError(t, err)
	require.Len(t, ports, n)
}

// TestForeignPinsSurvive: an interface named like another package's pin
// directory (here a directory with a foreign pin) loses only xdpfab's pins
// on detach.
func TestForeignPinsSurvive(t *testing.T) {
	p := newPair(t)
	dir, err := bpffs.Ensure(p.pinDir(t))
	require.NoError(t, err)
	foreign, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(t, err)
	t.Cleanup(func() { foreign.Close() })
	foreignPin := filepath.Join(dir, "someone_elses_map")
	require.NoError(t, foreign.Pin(foreignPin))
	t.Cleanup(func() { _ = foreign.Unpin() })

	p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric})
	require.NoError(t, p.detach())
	require.FileExists(t, foreignPin)
	require.NoFileExists(t, filepath.Join(dir, "link"))
	require.Zero(t, p.linkXDP(t).ProgId)
	require.ErrorIs(t, p.detach(), fi.ENOENT, "nothing of xdpfab's left")
}
