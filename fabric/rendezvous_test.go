package fabric_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestRendezvous: messages around and far above the eager limit, tagged
// and not, to a receive posted before and after they arrive, gathered and
// scattered over iovecs: every byte arrives, and a rendezvous send
// completes only once its receive has the data.
func TestRendezvous(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	lim := fabric.DefaultEagerLimit
	sizes := []int{lim, lim + 1, 3*lim + 7, 8 << 20}
	for _, tagged := range []bool{false, true} {
		for _, posted := range []bool{true, false} {
			for i, size := range sizes {
				t.Run(fmt.Sprintf("tagged=%v/posted=%v/%d", tagged, posted, size), func(t *testing.T) {
					msg := fill(size, i)
					rb := make([]byte, size)
					recv := func() {
						// Three receive iovecs split at odd places.
						iov := [][]byte{rb[:size/3], rb[size/3 : size/3+1], rb[size/3+1:]}
						if tagged {
							require.NoError(t, b.ep.TRecvV(iov, nil, fi.AddrUnspec, uint64(size), 0, "r"))
						} else {
							require.NoError(t, b.ep.RecvV(iov, nil, fi.AddrUnspec, "r"))
						}
					}
					if posted {
						recv()
					}
					siov := [][]byte{msg[:1], msg[1 : size/2], msg[size/2:]}
					if tagged {
						require.NoError(t, a.ep.TSendV(siov, nil, a.peer, uint64(size), "s"))
					} else {
						require.NoError(t, a.ep.Send(msg, mr.Desc{}, a.peer, "s"))
					}
					if !posted {
						if size > lim {
							noComp(t, a.txCQ) // waits for its receive
							// Its header may take longer than noComp's 50 ms
							// to arrive on a loaded machine.
							require.Eventually(t, func() bool { return b.ep.Unexpected() == 1 },
								waitMs*time.Millisecond, time.Millisecond)
						}
						recv()
					}
					c := comp(t, b.rxCQ)
					require.Equal(t, "r", c.Context)
					require.Equal(t, size, c.Len)
					require.True(t, bytes.Equal(msg, rb), "message of %d bytes intact", size)
					require.Equal(t, "s", comp(t, a.txCQ).Context)
				})
			}
		}
	}
}

// TestRendezvousUnexpectedHoldsHeaders: unexpected rendezvous messages
// keep only their header, so more of them than MaxUnexpectedBytes can
// wait; each is pulled when its receive is posted.
func TestRendezvousUnexpectedHoldsHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 96 MiB")
	}
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	const size = 16 << 20
	n := fabric.MaxUnexpectedBytes/size + 2
	msg := fill(size, 1)
	for i := range n {
		require.NoError(t, a.ep.TSend(msg, mr.Desc{}, a.peer, uint64(i), i))
	}
	require.Eventually(t, func() bool { return b.ep.Unexpected() == n }, waitMs*time.Millisecond, time.Millisecond)
	noComp(t, a.txCQ)
	rb := make([]byte, size)
	for i := n - 1; i >= 0; i-- { // by tag, newest first
		clear(rb)
		require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, uint64(i), 0, i))
		c := comp(t, b.rxCQ)
		require.Equal(t, i, c.Context)
		require.True(t, bytes.Equal(msg, rb))
		require.Equal(t, i, comp(t, a.txCQ).Context)
	}
}

// TestUnexpectedQueueFull: with the unexpected queue full (here of
// rendezvous headers, MaxUnexpectedMsgs of them) the next message is
// refused at its sender with FI_ENORX; every message accepted is received
// intact and in order, and its send completes; then messages are accepted
// again.
func TestUnexpectedQueueFull(t *testing.T) {
	a, b := taggedPair(t, sideOpts{noEnable: true}, sideOpts{})
	require.NoError(t, a.ep.SetOpt(fabric.OptEndpoint, fabric.OptBufferedLimit, uint64(a.ep.InjectSize())))
	require.NoError(t, a.ep.Enable())
	size := a.ep.InjectSize() + 1
	msgs := make([][]byte, fabric.MaxUnexpectedMsgs)
	for i := range msgs {
		msgs[i] = fill(size, i)
		require.NoError(t, a.ep.TSend(msgs[i], mr.Desc{}, a.peer, uint64(i), i))
	}
	require.Eventually(t, func() bool { return b.ep.Unexpected() == fabric.MaxUnexpectedMsgs },
		waitMs*time.Millisecond, time.Millisecond)
	require.NoError(t, a.ep.TSend([]byte("eager, refused"), mr.Desc{}, a.peer, 1, "over"))
	e := errComp(t, a.txCQ)
	require.Equal(t, fi.ENORX, e.Err)
	require.Equal(t, "over", e.Context)
	require.NoError(t, a.ep.TSend(fill(size, 99), mr.Desc{}, a.peer, 1, "over2"))
	e = errComp(t, a.txCQ)
	require.Equal(t, fi.ENORX, e.Err, "a rendezvous message too")
	rb := make([]byte, size)
	for i := range msgs {
		require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), i))
		c := comp(t, b.rxCQ)
		require.Equal(t, i, c.Context, "in send order")
		require.Equal(t, uint64(i), c.Tag)
		require.Equal(t, msgs[i], rb)
	}
	done := map[any]bool{}
	for range msgs {
		done[comp(t, a.txCQ).Context] = true
	}
	require.Len(t, done, len(msgs))
	require.NoError(t, a.ep.TSend([]byte("again"), mr.Desc{}, a.peer, 1, "again"))
	require.Equal(t, "again", comp(t, a.txCQ).Context)
	noComp(t, a.txCQ)
}

// TestRendezvousSenderGone: a rendezvous message whose sender closed
// before the receive was posted fails that receive (its CTS is refused);
// one whose sender's address is removed from the AV is dropped.
func TestRendezvousSenderGone(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	big := fill(fabric.DefaultEagerLimit*2, 1)
	require.NoError(t, a.ep.TSend(big, mr.Desc{}, a.peer, 1, nil))
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 1 }, waitMs*time.Millisecond, time.Millisecond)
	require.NoError(t, a.ep.Close())
	e := errComp(t, a.txCQ)
	require.Equal(t, fi.ECANCELED, e.Err, "the send waiting for its CTS is cancelled at close")
	require.NoError(t, b.ep.TRecv(make([]byte, len(big)), mr.Desc{}, fi.AddrUnspec, 1, 0, "orphan"))
	e = errComp(t, b.rxCQ)
	require.Equal(t, "orphan", e.Context)
	require.Contains(t, []fi.Errno{fi.ECONNREFUSED, fi.ETIMEDOUT}, e.Err)

	c, d := taggedPair(t, sideOpts{}, sideOpts{})
	require.NoError(t, c.ep.TSend(big, mr.Desc{}, c.peer, 1, "gone"))
	require.Eventually(t, func() bool { return d.ep.Unexpected() == 1 }, waitMs*time.Millisecond, time.Millisecond)
	require.NoError(t, d.av.Remove([]fi.Addr{d.peer}, 0))
	require.Equal(t, 0, d.ep.Unexpected())
	require.NoError(t, c.av.Remove([]fi.Addr{c.peer}, 0))
	e = errComp(t, c.txCQ)
	require.Equal(t, "gone", e.Context)
	require.Equal(t, fi.ECANCELED, e.Err)
}

// TestRendezvousForgedControl: a CTS that does not name a live send of the
// peer it comes from, and rendezvous data for no live receive, are
// refused (FI_ENOENT) and move nothing: the send buffer is reachable only
// by the receiver the RTS went to.
func TestRendezvousForgedControl(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	big := fill(fabric.DefaultEagerLimit*2, 7)
	require.NoError(t, a.ep.TSend(big, mr.Desc{}, a.peer, 1, "real"))
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 1 }, waitMs*time.Millisecond, time.Millisecond)

	// A third party, in a's and b's AVs, guesses handles.
	tr, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	require.NoError(t, err)
	done := make(chan reliable.Completion, 64)
	eng, err := reliable.New(tr, reliable.Config{EndpointID: 1, OnComplete: func(c reliable.Completion) { done <- c }})
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	a.insert(t, wireName(tr.LocalAddr()))
	b.insert(t, wireName(tr.LocalAddr()))
	submit := func(to *fabric.Endpoint, proto wire.MsgProto, rkey uint64, payload []byte) fi.Errno {
		t.Helper()
		require.NoError(t, eng.Submit(&reliable.Request{Peer: reliable.Peer{Addr: to.LocalAddr(), EP: 1}, Opcode: wire.OpMsg,
			Datatype: uint8(proto), RKey: rkey, Payload: payload}))
		select {
		case c := <-done:
			return c.Err
		case <-time.After(waitMs * time.Millisecond):
			t.Fatal("no answer")
		}
		return 0
	}
	var cts [wire.CTSLen]byte
	for idx := range uint64(8) {
		for gen := range uint64(4) {
			(&wire.CTS{Handle: idx | gen<<32, Recv: 1, Accept: 1 << 20}).Put(cts[:])
			require.Equal(t, fi.ENOENT, submit(a.ep, wire.MsgCTS, 0, cts[:]), "CTS for handle %d/%d", idx, gen)
		}
	}
	require.Equal(t, fi.EINVAL, submit(a.ep, wire.MsgCTS, 0, cts[:3]), "a short CTS")
	require.Equal(t, fi.ENOENT, submit(b.ep, wire.MsgData, wire.RndvKey(1, 0), []byte("junk")), "data for no receive")
	var rts [wire.RTSLen]byte
	(&wire.RTS{Len: fabric.MaxMsgSize + 1}).Put(rts[:])
	require.Equal(t, fi.EMSGSIZE, submit(b.ep, wire.MsgRTS, 0, rts[:]), "an RTS over max_msg_size")
	noComp(t, a.txCQ)

	// The real receiver still gets the message, and its data only.
	rb := make([]byte, len(big))
	require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 1, 0, "r"))
	comp(t, b.rxCQ)
	require.True(t, bytes.Equal(big, rb))
	require.Equal(t, "real", comp(t, a.txCQ).Context)
	// A third party's data for a receive granted to a: refused.
	rb2 := make([]byte, len(big))
	require.NoError(t, b.ep.TRecv(rb2, mr.Desc{}, fi.AddrUnspec, 2, 0, "r2"))
	require.NoError(t, a.ep.TSend(big, mr.Desc{}, a.peer, 2, "real2"))
	for rid := uint32(1); rid < 4; rid++ {
		require.Equal(t, fi.ENOENT, submit(b.ep, wire.MsgData, wire.RndvKey(rid, 0), []byte("junk")))
	}
	comp(t, b.rxCQ)
	require.True(t, bytes.Equal(big, rb2), "only a's data landed")
	comp(t, a.txCQ)
}

// wireName is an AV name (sockaddr) for ap.
func wireName(ap netip.AddrPort) []byte { return av.AppendSockaddr(nil, ap) }
