package fabric_test

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// side is one loopback endpoint with everything a unit test needs around
// it. Unlike e2e_test.go's node it is configurable piece by piece and opens
// its AV without a kernel mirror, so it needs no privileges.
type side struct {
	dom        *fabric.Domain
	ep         *fabric.Endpoint
	av         *av.AV
	txCQ, rxCQ *fabric.CQ
	// cntr holds one counter per fi_ep_bind counter flag asked for in
	// sideOpts.cntrs, so each kind's count is seen alone.
	cntr   map[fi.Flags]*fabric.Cntr
	mem    []byte
	region *mr.MR
	peer   fi.Addr // the other side, once connected
}

type sideOpts struct {
	dom      fabric.DomainAttr
	ep       fabric.EPAttr
	av       av.Attr
	txCQ     *fabric.CQAttr // nil: WaitUnspec defaults
	rxCQ     *fabric.CQAttr
	noTxCQ   bool
	noRxCQ   bool
	cqFlags  fi.Flags // added to both CQ bindings (fi.SELECTIVE_COMPLETION)
	cntrs    fi.Flags // one counter per bit
	memLen   int      // registered region size (default 1 MiB; -1: none)
	noEnable bool
}

const regionKey = 0x5eed

var counterKinds = []fi.Flags{fi.SEND, fi.RECV, fi.READ, fi.WRITE, fi.REMOTE_READ, fi.REMOTE_WRITE}

func newSide(t testing.TB, o sideOpts) *side {
	t.Helper()
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	if !o.dom.Addr.IsValid() {
		o.dom.Addr = netip.MustParseAddr("127.0.0.1")
	}
	if o.dom.Transport == fabric.TransportAuto {
		o.dom.Transport = fabric.TransportUDP
	}
	s := &side{cntr: map[fi.Flags]*fabric.Cntr{}}
	s.dom, err = f.Domain(o.dom, "dom")
	require.NoError(t, err)
	s.ep, err = s.dom.Endpoint(o.ep, "ep")
	require.NoError(t, err)
	s.av, err = av.Open(o.av, "av", av.WithMirror(nil))
	require.NoError(t, err)
	require.NoError(t, s.ep.Bind(s.av, 0))
	openCQ := func(a *fabric.CQAttr, ctx string) *fabric.CQ {
		attr := fabric.CQAttr{WaitObj: fi.WaitUnspec}
		if a != nil {
			attr = *a
		}
		cq, err := s.dom.CQOpen(attr, ctx)
		require.NoError(t, err)
		return cq
	}
	if !o.noTxCQ {
		s.txCQ = openCQ(o.txCQ, "txcq")
		require.NoError(t, s.ep.Bind(s.txCQ, fi.TRANSMIT|o.cqFlags))
	}
	if !o.noRxCQ {
		s.rxCQ = openCQ(o.rxCQ, "rxcq")
		require.NoError(t, s.ep.Bind(s.rxCQ, fi.RECV|o.cqFlags))
	}
	for _, k := range counterKinds {
		if o.cntrs&k == 0 {
			continue
		}
		c, err := s.dom.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitUnspec}, k)
		require.NoError(t, err)
		require.NoError(t, s.ep.Bind(c, k))
		s.cntr[k] = c
	}
	if !o.noEnable {
		require.NoError(t, s.ep.Enable())
	}
	if o.memLen == 0 {
		o.memLen = 1 << 20
	}
	if o.memLen > 0 {
		s.mem = make([]byte, o.memLen)
		s.region, err = s.dom.MRReg(s.mem, fi.REMOTE_READ|fi.REMOTE_WRITE|fi.READ|fi.WRITE|fi.SEND|fi.RECV,
			0, regionKey, 0, nil)
		require.NoError(t, err)
	}
	t.Cleanup(func() { s.close(t) })
	return s
}

// close releases everything, checking each close; safe to call twice.
func (s *side) close(t testing.TB) {
	t.Helper()
	if s.dom == nil {
		return
	}
	if !s.ep.Closed() {
		require.NoError(t, s.ep.Close())
	}
	for _, c := range s.cntr {
		require.NoError(t, c.Close())
	}
	if s.region != nil {
		require.NoError(t, s.region.Close())
	}
	for _, cq := range []*fabric.CQ{s.txCQ, s.rxCQ} {
		if cq != nil {
			require.NoError(t, cq.Close())
		}
	}
	require.NoError(t, s.av.Close())
	require.NoError(t, s.dom.Close())
	s.dom = nil
}

// insert puts addr's endpoint into s's AV and returns its fi_addr.
func (s *side) insert(t testing.TB, name []byte) fi.Addr {
	t.Helper()
	fa := make([]fi.Addr, 1)
	n, err := s.av.Insert([][]byte{name}, fa, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return fa[0]
}

// link inserts each side into the other's AV.
func link(t testing.TB, a, b *side) {
	t.Helper()
	a.peer = a.insert(t, b.ep.GetName())
	b.peer = b.insert(t, a.ep.GetName())
}

// pair returns two linked sides.
func pair(t testing.TB, oa, ob sideOpts) (*side, *side) {
	t.Helper()
	a, b := newSide(t, oa), newSide(t, ob)
	link(t, a, b)
	return a, b
}

// deadPeer inserts into s's AV the address of a UDP socket that has been
// closed again: requests to it are never answered (the kernel may report
// ICMP port unreachable).
func (s *side) deadPeer(t testing.TB) fi.Addr {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
	require.NoError(t, c.Close())
	fa := make([]fi.Addr, 1)
	n, err := s.av.InsertAddrPort([]netip.AddrPort{ap}, fa, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return fa[0]
}

// silentPeer inserts into s's AV the address of an open UDP socket that
// never reads: requests to it are neither answered nor refused, so they
// stay outstanding until the retry budget runs out.
func (s *side) silentPeer(t testing.TB) fi.Addr {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	fa := make([]fi.Addr, 1)
	n, err := s.av.InsertAddrPort([]netip.AddrPort{c.LocalAddr().(*net.UDPAddr).AddrPort()}, fa, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return fa[0]
}

const waitMs = 5000

// comp reads one success completion from cq, failing on an error one.
func comp(t testing.TB, cq *fabric.CQ) fabric.CQEntry {
	t.Helper()
	e, _ := compFrom(t, cq)
	return e
}

// compFrom is comp that also returns the completion's source.
func compFrom(t testing.TB, cq *fabric.CQ) (fabric.CQEntry, fi.Addr) {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	src := make([]fi.Addr, 1)
	n, err := cq.SReadFrom(buf, src, waitMs)
	if errors.Is(err, fi.EAVAIL) {
		e, rerr := cq.ReadErr(0)
		require.NoError(t, rerr)
		t.Fatalf("unexpected error completion: %v (context %v)", e.Err, e.Context)
	}
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return buf[0], src[0]
}

// errComp reads one error completion from cq.
func errComp(t testing.TB, cq *fabric.CQ) fabric.CQErrEntry {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	n, err := cq.SRead(buf, waitMs)
	require.ErrorIs(t, err, fi.EAVAIL, "got %d completions (%+v) instead of an error", n, buf[0])
	e, err := cq.ReadErr(0)
	require.NoError(t, err)
	return e
}

// noComp checks that cq stays empty for a short while.
func noComp(t testing.TB, cq *fabric.CQ) {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	n, err := cq.SRead(buf, 50)
	require.ErrorIs(t, err, fi.EAGAIN, "unexpected completion %+v", buf[:n])
}

// pending waits until cq has an entry (success or error) without taking it.
func pending(t testing.TB, cq *fabric.CQ) {
	t.Helper()
	require.Eventually(t, func() bool { return errors.Is(cq.TryWait(), fi.EAGAIN) },
		waitMs*time.Millisecond, 200*time.Microsecond)
}

// settleGoroutines waits (bounded) for the goroutine count to fall to at
// most n and reports the final count.
func settleGoroutines(n int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		g := runtime.NumGoroutine()
		if g <= n || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queued waits until cq holds at least n entries, without taking any.
func queued(t testing.TB, cq *fabric.CQ, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return cq.Queued() >= n },
		waitMs*time.Millisecond, 200*time.Microsecond, "waiting for %d CQ entries", n)
}

// rmaMsg is the fi_msg_rma of a one-buffer write or read of buf at addr in
// the peer's region key.
func rmaMsg(buf []byte, peer fi.Addr, addr, key uint64, ctx any, data uint64) *fabric.MsgRMA {
	return &fabric.MsgRMA{MsgIOV: [][]byte{buf}, Addr: peer,
		RMAIOV: []fabric.RMAIov{{Addr: addr, Len: len(buf), Key: key}}, Context: ctx, Data: data}
}
