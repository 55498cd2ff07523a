package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// node is one side of a test: a domain with an endpoint, its AV, CQs and a
// registered region.
type node struct {
	dom    *fabric.Domain
	ep     *fabric.Endpoint
	av     *av.AV
	txCQ   *fabric.CQ
	rxCQ   *fabric.CQ
	mem    []byte
	region *mr.MR
	peer   fi.Addr
	// rcntr counts operations executed at this node as a target; reading
	// it (an atomic load) is what orders the test's reads of mem after the
	// datapath goroutine's writes.
	rcntr   *fabric.Cntr
	targets uint64
}

// synced waits until n has counted k more target operations.
func (n *node) synced(t testing.TB, k uint64) {
	t.Helper()
	n.targets += k
	require.NoError(t, n.rcntr.Wait(n.targets, 5000))
}

// remote reads size bytes of peer memory at off through RMA. Tests check
// target memory this way: reading it directly while the target's datapath
// goroutine may write it is a data race (the UDP hop is no synchronization).
func (n *node) remote(t testing.TB, off uint64, size int, key uint64) []byte {
	t.Helper()
	buf := make([]byte, size)
	require.NoError(t, n.ep.Read(buf, mr.Desc{}, n.peer, off, key, "remote-read"))
	require.Equal(t, "remote-read", waitComp(t, n.txCQ).Context)
	return buf
}

type nodeOpts struct {
	addr     netip.Addr
	epAttr   fabric.EPAttr
	avAttr   av.Attr
	memLen   int
	progress fabric.Progress
	authKey  []byte
}

func newNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	if !o.addr.IsValid() {
		o.addr = netip.MustParseAddr("127.0.0.1")
	}
	d, err := f.Domain(fabric.DomainAttr{Addr: o.addr, Progress: o.progress, AuthKey: o.authKey}, nil)
	require.NoError(t, err)
	n := &node{dom: d}
	n.ep, err = d.Endpoint(o.epAttr, "ep")
	require.NoError(t, err)
	n.av, err = av.Open(o.avAttr, "av")
	require.NoError(t, err)
	n.txCQ, err = d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, "txcq")
	require.NoError(t, err)
	n.rxCQ, err = d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, "rxcq")
	require.NoError(t, err)
	require.NoError(t, n.ep.Bind(n.av, 0))
	require.NoError(t, n.ep.Bind(n.txCQ, fi.TRANSMIT))
	require.NoError(t, n.ep.Bind(n.rxCQ, fi.RECV))
	n.rcntr, err = d.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	require.NoError(t, n.ep.Bind(n.rcntr, fi.REMOTE_WRITE|fi.REMOTE_READ))
	require.NoError(t, n.ep.Enable())
	if o.memLen == 0 {
		o.memLen = 1 << 20
	}
	n.mem = make([]byte, o.memLen)
	n.region, err = d.MRReg(n.mem, fi.REMOTE_READ|fi.REMOTE_WRITE, 0, 0x1000+uint64(len(o.addr.String())), 0, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, n.ep.Close())
		require.NoError(t, n.rcntr.Close())
		require.NoError(t, n.region.Close())
		require.NoError(t, n.txCQ.Close())
		require.NoError(t, n.rxCQ.Close())
		require.NoError(t, n.av.Close())
		require.NoError(t, d.Close())
	})
	return n
}

// connect inserts each node's name into the other's AV.
func connect(t testing.TB, a, b *node) {
	t.Helper()
	fa := make([]fi.Addr, 1)
	cnt, err := a.av.Insert([][]byte{b.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, cnt)
	a.peer = fa[0]
	cnt, err = b.av.Insert([][]byte{a.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, cnt)
	b.peer = fa[0]
}

// waitComp reads one completion from cq within the timeout.
func waitComp(t testing.TB, cq *fabric.CQ) fabric.CQEntry {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	n, err := cq.SRead(buf, 5000)
	if errors.Is(err, fi.EAVAIL) {
		e, rerr := cq.ReadErr(0)
		require.NoError(t, rerr)
		t.Fatalf("error completion: %v (ctx %v)", e.Err, e.Context)
	}
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return buf[0]
}

// waitErr reads one error completion from cq.
func waitErr(t testing.TB, cq *fabric.CQ) fabric.CQErrEntry {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	_, err := cq.SRead(buf, 5000)
	require.ErrorIs(t, err, fi.EAVAIL)
	e, err := cq.ReadErr(0)
	require.NoError(t, err)
	return e
}

func TestLoopbackMessagesRMAAtomics(t *testing.T) {
	a, b := newNode(t, nodeOpts{}), newNode(t, nodeOpts{})
	connect(t, a, b)

	// Messages, received with their source.
	rbuf := make([]byte, 100)
	require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "recv1"))
	require.NoError(t, a.ep.Send([]byte("hello over xdpfab"), mr.Desc{}, a.peer, "send1"))
	c := waitComp(t, a.txCQ)
	require.Equal(t, "send1", c.Context)
	require.Equal(t, fi.SEND|fi.MSG, c.Flags)
	buf := make([]fabric.CQEntry, 1)
	src := make([]fi.Addr, 1)
	require.Eventually(t, func() bool { n, _ := b.rxCQ.ReadFrom(buf, src); return n == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, "recv1", buf[0].Context)
	require.Equal(t, 17, buf[0].Len)
	require.Equal(t, "hello over xdpfab", string(rbuf[:17]))
	require.Equal(t, b.peer, src[0], "FI_SOURCE reports the sender's fi_addr")

	// RMA write then read back, across sizes (segmented above one packet).
	for _, size := range []int{1, 1000, 1500, 64 << 10, 1 << 20} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*31 + size)
		}
		require.NoError(t, a.ep.Write(data, mr.Desc{}, a.peer, 0, b.region.Key(), size))
		require.Equal(t, size, waitComp(t, a.txCQ).Context)
		b.synced(t, 1)
		require.True(t, bytes.Equal(data, a.remote(t, 0, size, b.region.Key())), "RMA write+read of %d bytes", size)
		b.synced(t, 1)
	}

	// Fetch-add on a uint64 returns the old value.
	require.NoError(t, a.ep.Write(make([]byte, 8), mr.Desc{}, a.peer, 0, b.region.Key(), nil))
	waitComp(t, a.txCQ)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	old := make([]byte, 8)
	for i := uint64(0); i < 100; i++ {
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peer, 0, b.region.Key(),
			fatomic.UINT64, fatomic.SUM, i))
		waitComp(t, a.txCQ)
		require.Equal(t, i, binary.LittleEndian.Uint64(old))
	}
	require.Equal(t, uint64(100), binary.LittleEndian.Uint64(a.remote(t, 0, 8, b.region.Key())))

	// Compare-and-swap.
	cmp := binary.LittleEndian.AppendUint64(nil, 100)
	nv := binary.LittleEndian.AppendUint64(nil, 7)
	require.NoError(t, a.ep.CompareAtomic(nv, 1, mr.Desc{}, cmp, mr.Desc{}, old, mr.Desc{}, a.peer, 0,
		b.region.Key(), fatomic.UINT64, fatomic.CSWAP, "cas"))
	waitComp(t, a.txCQ)
	require.Equal(t, uint64(100), binary.LittleEndian.Uint64(old))
	require.Equal(t, uint64(7), binary.LittleEndian.Uint64(a.remote(t, 0, 8, b.region.Key())))
}

func TestTargetErrorsLeaveMemoryUntouched(t *testing.T) {
	a, b := newNode(t, nodeOpts{}), newNode(t, nodeOpts{})
	connect(t, a, b)
	ro, err := b.dom.MRReg(make([]byte, 64), fi.REMOTE_READ, 0, 0x77, 0, nil)
	require.NoError(t, err)
	defer ro.Close()
	snapshot := a.remote(t, 0, 4096, b.region.Key())
	for _, tc := range []struct {
		name string
		key  uint64
		addr uint64
		want fi.Errno
	}{
		{"unknown key", 0xdead, 0, fi.ErrnoOf(mr.UnknownKey)},
		{"out of range", b.region.Key(), uint64(len(b.mem)) - 4, fi.ErrnoOf(mr.OutOfRange)},
		{"no write access", 0x77, 0, fi.ErrnoOf(mr.AccessDenied)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, a.ep.Write([]byte("12345678"), mr.Desc{}, a.peer, tc.addr, tc.key, tc.name))
			e := waitErr(t, a.txCQ)
			require.Equal(t, tc.name, e.Context)
			require.Equal(t, tc.want, e.Err, "got %v", e.Err)
			require.NoError(t, a.ep.Atomic(binary.LittleEndian.AppendUint64(nil, 5), 1, mr.Desc{}, a.peer, tc.addr, tc.key,
				fatomic.UINT64, fatomic.SUM, tc.name))
			e = waitErr(t, a.txCQ)
			require.Equal(t, tc.want, e.Err)
		})
	}
	require.Equal(t, snapshot, a.remote(t, 0, 4096, b.region.Key()), "target memory untouched")
}

func TestPostingErrors(t *testing.T) {
	a, b := newNode(t, nodeOpts{}), newNode(t, nodeOpts{})
	connect(t, a, b)
	one := make([]byte, 8)
	require.ErrorIs(t, a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, 1, fatomic.FLOAT, fatomic.BOR, nil), fi.EOPNOTSUPP)
	require.ErrorIs(t, a.ep.Atomic(one, 1, mr.Desc{}, fi.Addr(99), 0, 1, fatomic.UINT64, fatomic.SUM, nil), fi.EADDRNOTAVAIL)
	require.ErrorIs(t, a.ep.Atomic(one, 2, mr.Desc{}, a.peer, 0, 1, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL, "short buffer")
	require.ErrorIs(t, a.ep.Atomic(one, 100000, mr.Desc{}, a.peer, 0, 1, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL,
		"buffer shorter than count")
	require.ErrorIs(t, a.ep.Atomic(make([]byte, 8*100000), 100000, mr.Desc{}, a.peer, 0, 1, fatomic.UINT64, fatomic.SUM, nil),
		fi.EMSGSIZE, "count over the valid limit")
	require.ErrorIs(t, a.ep.AtomicMsg(&fabric.MsgAtomic{MsgIOV: []fabric.IOC{{one, 1}}, Addr: a.peer,
		RMAIOV: []fabric.RMAIOC{{0, 1, 1}}, Datatype: fatomic.UINT64, Op: fatomic.SUM}, fi.TAGGED), fi.EOPNOTSUPP)
	require.ErrorIs(t, a.ep.Inject(make([]byte, fabric.InjectSize+1), a.peer), fi.EMSGSIZE)
	n, err := a.ep.AtomicValid(fatomic.UINT64, fatomic.SUM)
	require.NoError(t, err)
	require.Greater(t, n, 100)
	_ = fmt.Sprint(n)
}

// TestAuthKeys: a region registered under an authorization key (here the
// target domain's) serves only initiators whose domain has the same key;
// others get FI_EACCES and the memory is untouched.
func TestAuthKeys(t *testing.T) {
	key := []byte("sekrit-1")
	target := newNode(t, nodeOpts{authKey: key})
	good := newNode(t, nodeOpts{authKey: key})
	wrong := newNode(t, nodeOpts{authKey: []byte("sekrit-2")})
	none := newNode(t, nodeOpts{})
	for _, n := range []*node{good, wrong, none} {
		connect(t, n, target)
	}
	require.NoError(t, good.ep.Write([]byte("allowed!"), mr.Desc{}, good.peer, 0, target.region.Key(), "good"))
	require.Equal(t, "good", waitComp(t, good.txCQ).Context)
	for _, n := range []*node{wrong, none} {
		require.NoError(t, n.ep.Write([]byte("intruder"), mr.Desc{}, n.peer, 0, target.region.Key(), "w"))
		require.Equal(t, fi.EACCES, waitErr(t, n.txCQ).Err)
		require.NoError(t, n.ep.Read(make([]byte, 8), mr.Desc{}, n.peer, 0, target.region.Key(), "r"))
		require.Equal(t, fi.EACCES, waitErr(t, n.txCQ).Err)
	}
	require.Equal(t, "allowed!", string(good.remote(t, 0, 8, target.region.Key())))
}
