package afxdp_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

const testPort = 7471

type side struct {
	ns     *testenv.Netns
	iface  string
	addr   netip.Addr
	dom    *fabric.Domain
	ep     *fabric.Endpoint
	av     *av.AV
	cq     *fabric.CQ
	region *mr.MR
	peer   fi.Addr
}

// attachBoth attaches xdpfab on both veth ends in mode and detaches at the
// end of the test.
func attachBoth(t *testing.T, v *testenv.Veth, mode xdp.Mode) {
	for _, e := range []struct {
		ns    *testenv.Netns
		iface string
	}{{v.A, v.NameA}, {v.B, v.NameB}} {
		require.NoError(t, e.ns.Do(func() error {
			att, err := xdp.Attach(e.iface, xdp.Options{Mode: mode})
			if err != nil {
				return err
			}
			return att.Close()
		}))
		t.Cleanup(func() { _ = e.ns.Do(func() error { return xdp.Detach(e.iface) }) })
	}
}

func openSide(t *testing.T, ns *testenv.Netns, iface string, addr netip.Addr) *side {
	return openSideAttr(t, ns, iface, fabric.DomainAttr{Addr: addr, Port: testPort, Transport: fabric.TransportXDP})
}

func openSideAttr(t *testing.T, ns *testenv.Netns, iface string, attr fabric.DomainAttr) *side {
	addr := attr.Addr
	s := &side{ns: ns, iface: iface, addr: addr}
	require.NoError(t, ns.Do(func() error {
		f, err := fabric.OpenFabric("", nil)
		if err != nil {
			return err
		}
		s.dom, err = f.Domain(attr, nil)
		if err != nil {
			return err
		}
		if s.dom.Transport() != fabric.TransportXDP {
			return fmt.Errorf("domain transport %v", s.dom.Transport())
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
	s.region, err = s.dom.MRReg(make([]byte, 1<<20), fi.REMOTE_READ|fi.REMOTE_WRITE, 0, 0xC0DE, 0, nil)
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

func connect(t *testing.T, a, b *side) {
	fa := make([]fi.Addr, 1)
	_, err := a.av.Insert([][]byte{b.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	a.peer = fa[0]
	_, err = b.av.Insert([][]byte{a.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	b.peer = fa[0]
}

func complete(t *testing.T, cq *fabric.CQ) fabric.CQEntry {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	n, err := cq.SRead(buf, 5000)
	if errors.Is(err, fi.EAVAIL) {
		e, _ := cq.ReadErr(0)
		t.Fatalf("error completion %v", e.Err)
	}
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return buf[0]
}

func counters(t *testing.T, s *side) xdp.Counters {
	var c xdp.Counters
	require.NoError(t, s.ns.Do(func() error {
		att, err := xdp.Open(s.iface)
		if err != nil {
			return err
		}
		defer att.Close()
		c, err = att.Counters()
		return err
	}))
	return c
}

func TestFabricOverAFXDP(t *testing.T) {
	testenv.RequirePriv(t)
	for _, mode := range []xdp.Mode{xdp.ModeNative, xdp.ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			a, b := testenv.NewNetns(t), testenv.NewNetns(t)
			v := testenv.NewVeth(t, a, b, testenv.VethOptions{MTU: 3000})
			attachBoth(t, v, mode)
			sa := openSide(t, a, v.NameA, v.AddrA.Addr())
			sb := openSide(t, b, v.NameB, v.AddrB.Addr())
			connect(t, sa, sb)
			before := counters(t, sb)

			// Remote fetch-adds through AF_XDP at both ends.
			one := binary.LittleEndian.AppendUint64(nil, 1)
			old := make([]byte, 8)
			for i := uint64(0); i < 500; i++ {
				require.NoError(t, sa.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, sa.peer, 0, sb.region.Key(),
					fatomic.UINT64, fatomic.SUM, nil))
				complete(t, sa.cq)
				require.Equal(t, i, binary.LittleEndian.Uint64(old))
			}
			// RMA across several packets.
			data := make([]byte, 64<<10)
			for i := range data {
				data[i] = byte(i * 13)
			}
			require.NoError(t, sa.ep.Write(data, mr.Desc{}, sa.peer, 4096, sb.region.Key(), nil))
			complete(t, sa.cq)
			back := make([]byte, len(data))
			require.NoError(t, sa.ep.Read(back, mr.Desc{}, sa.peer, 4096, sb.region.Key(), nil))
			complete(t, sa.cq)
			require.Equal(t, data, back)

			// A bad key is NAKed by the target.
			require.NoError(t, sa.ep.Write(data[:8], mr.Desc{}, sa.peer, 0, 0xBAD, "bad"))
			buf := make([]fabric.CQEntry, 1)
			_, err := sa.cq.SRead(buf, 5000)
			require.ErrorIs(t, err, fi.EAVAIL)
			e, err := sa.cq.ReadErr(0)
			require.NoError(t, err)
			require.Equal(t, "bad", e.Context)
			require.Equal(t, fi.ErrnoOf(mr.UnknownKey), e.Err)

			after := counters(t, sb)
			require.Greater(t, after[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK]-before[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK], uint64(500),
				"requests reached the target through AF_XDP")

			// A peer outside the AV is dropped in XDP: its forged request
			// never reaches the endpoint.
			statsBefore := sb.ep.Stats()
			var rogue *net.UDPConn
			require.NoError(t, a.Do(func() error {
				var err error
				rogue, err = net.ListenUDP("udp4", &net.UDPAddr{IP: v.AddrA.Addr().AsSlice(), Port: 9999})
				return err
			}))
			defer rogue.Close()
			pkt := make([]byte, 256)
			var bld wire.Builder
			bld.Reset(pkt, wire.Header{Type: wire.TypeReq, SrcEP: 1, DstEP: 1, Session: 7, Seq: 1, Ack: 1})
			require.NoError(t, bld.AddOp(wire.OpDesc{Opcode: wire.OpRMAWrite, Access: wire.AccessWrite, Len: 8,
				RKey: sb.region.Key(), Flags: wire.OpFirst | wire.OpLast}, make([]byte, 8), nil))
			raw := bld.Finish()
			for i := 0; i < 10; i++ {
				_, err := rogue.WriteToUDP(raw, &net.UDPAddr{IP: v.AddrB.Addr().AsSlice(), Port: testPort})
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool {
				c := counters(t, sb)
				return c[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER]-after[bpf.XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER] >= 10
			}, 3*time.Second, 10*time.Millisecond)
			st := sb.ep.Stats()
			require.Equal(t, statsBefore.Delivered, st.Delivered, "the rogue request was never delivered")
			require.Equal(t, statsBefore.Drops, st.Drops, "user space never saw it")
			_ = afxdp.FallbackPoll
		})
	}
}

// TestDomainAttachesAndFallsBack: TransportAuto without an attachment uses
// the kernel socket (and says why); with AttachXDP it attaches xdpfab itself
// and uses AF_XDP; TransportXDP without an attachment is an error.
func TestDomainAttachesAndFallsBack(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	var notices []string
	logf := func(format string, args ...any) { notices = append(notices, fmt.Sprintf(format, args...)) }
	require.NoError(t, a.Do(func() error {
		f, _ := fabric.OpenFabric("", nil)
		d, err := f.Domain(fabric.DomainAttr{Addr: v.AddrA.Addr(), Logf: logf}, nil)
		require.NoError(t, err)
		require.Equal(t, fabric.TransportUDP, d.Transport())
		require.NoError(t, d.Close())
		_, err = f.Domain(fabric.DomainAttr{Addr: v.AddrA.Addr(), Transport: fabric.TransportXDP}, nil)
		require.Error(t, err)
		return nil
	}))
	require.Len(t, notices, 1)
	require.Contains(t, notices[0], "not attached on "+v.NameA)

	t.Cleanup(func() { _ = a.Do(func() error { return xdp.Detach(v.NameA) }) })
	t.Cleanup(func() { _ = b.Do(func() error { return xdp.Detach(v.NameB) }) })
	sa := openSideAttr(t, a, v.NameA, fabric.DomainAttr{Addr: v.AddrA.Addr(), Port: testPort, AttachXDP: true})
	sb := openSideAttr(t, b, v.NameB, fabric.DomainAttr{Addr: v.AddrB.Addr(), Port: testPort, AttachXDP: true})
	require.Equal(t, fabric.TransportXDP, sa.dom.Transport())
	connect(t, sa, sb)
	require.NoError(t, sa.ep.Write([]byte("attached by the domain"), mr.Desc{}, sa.peer, 0, sb.region.Key(), nil))
	complete(t, sa.cq)
	back := make([]byte, 22)
	require.NoError(t, sa.ep.Read(back, mr.Desc{}, sa.peer, 0, sb.region.Key(), nil))
	complete(t, sa.cq)
	require.Equal(t, "attached by the domain", string(back))
	// Until the initiator's next hop is resolved (asynchronously, from the
	// first send), its datagrams take the kernel socket, and the target's
	// program passes them (their checksum left to offload): the two
	// operations above may all go that way on a slow run. Later ones reach
	// the target's AF_XDP socket.
	var c xdp.Counters
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c = counters(t, sb); c[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK] > 0 || time.Now().After(deadline) {
			break
		}
		require.NoError(t, sa.ep.Write([]byte("attached by the domain"), mr.Desc{}, sa.peer, 0, sb.region.Key(), nil))
		complete(t, sa.cq)
		time.Sleep(time.Millisecond)
	}
	require.Greater(t, c[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK], uint64(0),
		"the target's counters: %s; its endpoint's stats: %+v", nonzeroCounters(c), sb.ep.Stats())
}

// nonzeroCounters names the counters that moved, for a failure report.
func nonzeroCounters(c xdp.Counters) string {
	var b strings.Builder
	for i, v := range c {
		if v != 0 {
			fmt.Fprintf(&b, "%s=%d ", bpf.XdpfabXdpfabCounter(i), v)
		}
	}
	return b.String()
}
