package fabric_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestMultiRecv: one FI_MULTI_RECV buffer takes messages one after
// another, each completion's Buf where it landed; once less than
// FI_OPT_MIN_MULTI_RECV is left it is released and the completion of its
// last message carries FI_MULTI_RECV. Unexpected messages fill a buffer
// posted later; a message longer than the space left is truncated.
func TestMultiRecv(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	require.NoError(t, b.ep.SetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, uint64(1024)))
	buf := make([]byte, 4096)
	require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{buf}, Addr: fi.AddrUnspec, Context: "multi"}, fi.MULTI_RECV))
	msgs := [][]byte{fill(1000, 1), fill(1000, 2), fill(1000, 3), fill(1000, 4)}
	for i, m := range msgs {
		require.NoError(t, a.ep.Send(m, mr.Desc{}, a.peer, nil))
		comp(t, a.txCQ)
		c := comp(t, b.rxCQ)
		require.Equal(t, "multi", c.Context)
		require.Equal(t, 1000, c.Len)
		require.Equal(t, m, c.Buf)
		require.Equal(t, &buf[i*1000], &c.Buf[0], "packed one after another")
		if i < 3 {
			require.Equal(t, fi.RECV|fi.MSG, c.Flags, "1096 bytes or more left: not released")
		} else {
			require.Equal(t, fi.RECV|fi.MSG|fi.MULTI_RECV, c.Flags, "96 bytes left: released")
		}
	}
	// Released: the next message is unexpected.
	require.NoError(t, a.ep.Send([]byte("after"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	noComp(t, b.rxCQ)

	// A buffer posted now drains the unexpected messages (and a
	// truncated rendezvous one), then waits for more.
	big := fill(fabric.DefaultEagerLimit+10, 9)
	require.NoError(t, a.ep.Send(big, mr.Desc{}, a.peer, "big"))
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 2 }, waitMs*time.Millisecond, time.Millisecond)
	buf2 := make([]byte, 3000)
	require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{buf2}, Context: "m2"}, fi.MULTI_RECV))
	c := comp(t, b.rxCQ)
	require.Equal(t, "after", string(c.Buf))
	e := errComp(t, b.rxCQ)
	require.Equal(t, fi.ETRUNC, e.Err)
	require.Equal(t, fi.RECV|fi.MSG|fi.MULTI_RECV, e.Flags, "filled to the end: released")
	require.Equal(t, 3000-5, e.Len)
	require.Equal(t, len(big)-(3000-5), e.OLen)
	require.Equal(t, big[:3000-5], e.Buf)
	require.Equal(t, "big", comp(t, a.txCQ).Context)

	// Tagged receives do not take FI_MULTI_RECV (not a fi_trecvmsg flag).
	require.ErrorIs(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: [][]byte{buf}}, fi.MULTI_RECV), fi.EBADFLAGS)
}

// TestMultiRecvSelective: under FI_SELECTIVE_COMPLETION only the
// completion that releases a multi-recv buffer is written (fi_msg(3)),
// the others are suppressed and counted.
func TestMultiRecvSelective(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, cntrs: fi.RECV})
	require.NoError(t, b.ep.SetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, uint64(100)))
	buf := make([]byte, 1000)
	require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{buf}, Context: "sel"}, fi.MULTI_RECV))
	for i := range 5 {
		require.NoError(t, a.ep.Send(bytes.Repeat([]byte{byte(i)}, 200), mr.Desc{}, a.peer, nil))
		comp(t, a.txCQ)
	}
	c := comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.MSG|fi.MULTI_RECV, c.Flags)
	require.Equal(t, &buf[800], &c.Buf[0])
	noComp(t, b.rxCQ)
	require.Equal(t, uint64(5), b.cntr[fi.RECV].Read())
	for i := range 5 {
		require.Equal(t, bytes.Repeat([]byte{byte(i)}, 200), buf[i*200:(i+1)*200])
	}
}

// TestCancel: fi_cancel completes posted receives, tagged and untagged,
// with FI_ECANCELED error entries; a receive already matched is not
// cancelled and completes normally; a cancelled multi-recv buffer is
// released.
func TestCancel(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{cntrs: fi.RECV})
	require.NoError(t, b.ep.TRecv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, 42, 0, "t"))
	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "u"))
	require.NoError(t, b.ep.Cancel("t"))
	e := errComp(t, b.rxCQ)
	require.Equal(t, fi.ECANCELED, e.Err)
	require.Equal(t, "t", e.Context)
	require.Equal(t, fi.RECV|fi.TAGGED, e.Flags)
	require.Equal(t, uint64(42), e.Tag)
	require.NoError(t, b.ep.Cancel("u"))
	e = errComp(t, b.rxCQ)
	require.Equal(t, "u", e.Context)
	require.Equal(t, fi.RECV|fi.MSG, e.Flags)
	require.Equal(t, uint64(2), b.cntr[fi.RECV].ReadErr())
	require.NoError(t, b.ep.Cancel("u"), "nothing left to cancel")
	noComp(t, b.rxCQ)
	require.Zero(t, b.ep.PostedReceives())

	// A cancelled receive takes no message: the message waits.
	require.NoError(t, a.ep.TSend([]byte("x"), mr.Desc{}, a.peer, 42, nil))
	comp(t, a.txCQ)
	noComp(t, b.rxCQ)

	// Matched, data still moving (a 16 MiB rendezvous message): cancel
	// does nothing; the receive completes whole.
	big := fill(16<<20, 3)
	rb := make([]byte, len(big))
	require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 7, 0, "matched"))
	require.NoError(t, a.ep.TSend(big, mr.Desc{}, a.peer, 7, nil))
	require.Eventually(t, func() bool { return b.ep.PostedReceives() == 0 }, waitMs*time.Millisecond, 10*time.Microsecond)
	require.NoError(t, b.ep.Cancel("matched"))
	c := comp(t, b.rxCQ)
	require.Equal(t, "matched", c.Context)
	require.Equal(t, len(big), c.Len)
	require.True(t, bytes.Equal(big, rb))
	comp(t, a.txCQ)
	// Completed: cancel does nothing either.
	require.NoError(t, b.ep.Cancel("matched"))
	noComp(t, b.rxCQ)

	// A multi-recv buffer is released by its cancel's error entry, which
	// carries FI_MULTI_RECV, once no message is still arriving into it.
	require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{make([]byte, 64<<10)}, Context: "m0"}, fi.MULTI_RECV))
	require.NoError(t, b.ep.Cancel("m0"))
	e = errComp(t, b.rxCQ)
	require.Equal(t, fi.ECANCELED, e.Err)
	require.Equal(t, fi.RECV|fi.MSG|fi.MULTI_RECV, e.Flags)
	mb := make([]byte, 64<<10)
	require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{mb}, Context: "m1"}, fi.MULTI_RECV))
	require.NoError(t, a.ep.Send([]byte("in it"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	c = comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.MSG, c.Flags)
	require.NoError(t, b.ep.Cancel("m1"))
	e = errComp(t, b.rxCQ)
	require.Equal(t, "m1", e.Context)
	require.Equal(t, fi.RECV|fi.MSG|fi.MULTI_RECV, e.Flags)
	require.Zero(t, b.ep.PostedReceives())
	noComp(t, b.rxCQ)
}

// TestGetSetOpt: fi_getopt/fi_setopt on the options of fi_endpoint(3).
func TestGetSetOpt(t *testing.T) {
	s := newSide(t, sideOpts{noEnable: true})
	ep := s.ep
	var v uint64
	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, &v))
	require.Equal(t, uint64(fabric.DefaultMinMultiRecv), v)
	require.NoError(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, uint64(1)))
	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, &v))
	require.Equal(t, uint64(1), v)

	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, &v))
	require.Equal(t, uint64(fabric.DefaultEagerLimit), v)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, uint64(fabric.MaxEagerLimit+1)), fi.EMSGSIZE)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, uint64(ep.InjectSize()-1)), fi.EMSGSIZE)
	require.NoError(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, uint64(math.MaxUint64)))
	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, &v))
	require.Equal(t, uint64(fabric.MaxEagerLimit), v, "SIZE_MAX sets the largest")
	require.NoError(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, uint64(4096)))
	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptBufferedMin, &v))
	require.Zero(t, v)
	require.NoError(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedMin, uint64(0)))
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedMin, uint64(1)), fi.EMSGSIZE)

	var p2p int
	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptHMEMP2P, &p2p))
	require.Equal(t, fabric.HMEMP2PEnabled, p2p)
	require.NoError(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptHMEMP2P, fabric.HMEMP2PDisabled))
	require.NoError(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptHMEMP2P, &p2p))
	require.Equal(t, fabric.HMEMP2PDisabled, p2p)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptHMEMP2P, fabric.HMEMP2PRequired), fi.EOPNOTSUPP)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptHMEMP2P, 9), fi.EINVAL)

	// Wrong types (C's optlen), unknown options and levels.
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, &p2p), fi.EINVAL)
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, nil), fi.EINVAL)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, 5), fi.EINVAL)
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptHMEMP2P, &v), fi.EINVAL)
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptCMDataSize, &v), fi.ENOPROTOOPT)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptCMDataSize, uint64(1)), fi.ENOPROTOOPT)
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptXPUTrigger, &v), fi.EOPNOTSUPP)
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptXPUTrigger, uint64(1)), fi.ENOPROTOOPT)
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, fabric.OptTxSize, &v), fi.ENOPROTOOPT)
	require.ErrorIs(t, ep.GetOpt(fabric.OptEndpoint, 99, &v), fi.ENOPROTOOPT)
	require.ErrorIs(t, ep.GetOpt(1, fabric.OptMinMultiRecv, &v), fi.ENOPROTOOPT)
	require.ErrorIs(t, ep.SetOpt(1, fabric.OptMinMultiRecv, uint64(1)), fi.ENOPROTOOPT)

	// The eager limit is fixed once enabled; the new one is in use.
	require.NoError(t, ep.Enable())
	require.ErrorIs(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, uint64(8192)), fi.EOPBADSTATE)
	require.Equal(t, 4096, ep.EagerLimit())
	require.NoError(t, ep.SetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, uint64(7)), "applies to later receives")
}

// TestMultiRecvOpFlag: with FI_MULTI_RECV in rx_attr.op_flags
// (EPAttr.RxOpFlags) fi_recv and fi_recvv post multi-receive buffers;
// fi_recvv takes one buffer then, and tagged receives are untouched. An
// rx op flag xdpfab does not take is FI_EBADFLAGS.
func TestMultiRecvOpFlag(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{ep: fabric.EPAttr{RxOpFlags: fi.MULTI_RECV}})
	require.NoError(t, b.ep.SetOpt(fabric.OptEndpoint, fabric.OptMinMultiRecv, uint64(150)))
	buf := make([]byte, 500)
	require.NoError(t, b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, "m"))
	for i := range 2 {
		require.NoError(t, a.ep.Send(fill(200, i+1), mr.Desc{}, a.peer, nil))
		comp(t, a.txCQ)
		c := comp(t, b.rxCQ)
		require.Equal(t, &buf[i*200], &c.Buf[0])
		if i == 0 {
			require.Equal(t, fi.RECV|fi.MSG, c.Flags)
		} else {
			require.Equal(t, fi.RECV|fi.MSG|fi.MULTI_RECV, c.Flags, "100 bytes left, below 150: released")
		}
	}
	require.ErrorIs(t, b.ep.RecvV([][]byte{buf[:10], buf[10:]}, nil, fi.AddrUnspec, nil), fi.EINVAL)
	require.NoError(t, b.ep.TRecv(buf[:10], mr.Desc{}, fi.AddrUnspec, 7, 0, "t"))
	require.NoError(t, a.ep.TSend([]byte("tag"), mr.Desc{}, a.peer, 7, nil))
	comp(t, a.txCQ)
	c := comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.TAGGED, c.Flags)

	d := openDomain(t)
	_, err := d.Endpoint(fabric.EPAttr{RxOpFlags: fi.PEEK}, nil)
	require.ErrorIs(t, err, fi.EBADFLAGS)
}
