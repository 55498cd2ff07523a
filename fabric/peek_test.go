package fabric_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// peekCtx is a context FI_CLAIM can pair on (a comparable value).
type peekCtx struct{ id int }

// TestPeekClaimDiscard: the FI_PEEK family of fi_trecvmsg, eager and
// rendezvous messages: peek reports without taking, with data when asked;
// no match is an FI_ENOMSG error entry; peek+claim reserves the message
// for the paired FI_CLAIM receive only; peek+discard and claim+discard
// drop it (a dropped rendezvous send still completes at its sender).
func TestPeekClaimDiscard(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	peek := func(tag, ignore uint64, buf []byte, ctx any, flags fi.Flags) {
		t.Helper()
		var iov [][]byte
		if buf != nil {
			iov = [][]byte{buf}
		}
		require.NoError(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: iov, Addr: fi.AddrUnspec, Tag: tag, Ignore: ignore,
			Context: ctx}, flags))
	}
	send := func(msg []byte, tag uint64, ctx any) {
		t.Helper()
		require.NoError(t, a.ep.TSendData(msg, mr.Desc{}, tag*10, a.peer, tag, ctx))
	}
	big := fill(fabric.DefaultEagerLimit*2, 5)

	// Nothing there: FI_ENOMSG.
	peek(1, 0, nil, "p0", fi.PEEK)
	e := errComp(t, b.rxCQ)
	require.Equal(t, fi.ENOMSG, e.Err)
	require.Equal(t, "p0", e.Context)

	send([]byte("one"), 1, "s1")
	comp(t, a.txCQ)
	send(big, 2, "s2") // rendezvous: completes only when consumed
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 2 }, waitMs*time.Millisecond, time.Millisecond)

	// Peek with a buffer: the data, the length, tag and CQ data; the
	// message stays.
	pb := make([]byte, 2)
	peek(0, ^uint64(0), pb, "p1", fi.PEEK)
	c, src := compFrom(t, b.rxCQ)
	require.Equal(t, "p1", c.Context)
	require.Equal(t, fi.RECV|fi.TAGGED|fi.REMOTE_CQ_DATA, c.Flags)
	require.Equal(t, 3, c.Len, "the message's length, not the data returned")
	require.Equal(t, uint64(1), c.Tag)
	require.Equal(t, uint64(10), c.Data)
	require.Equal(t, b.peer, src)
	require.Equal(t, "on", string(pb))
	require.Equal(t, pb, c.Buf, "Buf is the caller's buffer when data was returned")
	require.Equal(t, 2, b.ep.Unexpected())
	// A rendezvous message: length and tag, no data.
	peek(2, 0, make([]byte, 10), "p2", fi.PEEK)
	c = comp(t, b.rxCQ)
	require.Equal(t, len(big), c.Len)
	require.Equal(t, uint64(2), c.Tag)
	require.Nil(t, c.Buf)

	// Peek+claim: the message leaves matching; only the claim receive
	// with the same context gets it.
	claimer := &peekCtx{1}
	peek(1, 0, nil, claimer, fi.PEEK|fi.CLAIM)
	require.Equal(t, claimer, comp(t, b.rxCQ).Context)
	peek(1, 0, nil, "p3", fi.PEEK)
	require.Equal(t, fi.ENOMSG, errComp(t, b.rxCQ).Err, "a claimed message is not seen by peeks")
	rb := make([]byte, 8)
	require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 1, 0, "plain"))
	noComp(t, b.rxCQ)
	require.ErrorIs(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: [][]byte{rb}, Context: &peekCtx{1}}, fi.CLAIM), fi.EINVAL,
		"another context (an equal value at another address) claimed nothing")
	cb := make([]byte, 8)
	require.NoError(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: [][]byte{cb}, Context: claimer}, fi.CLAIM))
	c = comp(t, b.rxCQ)
	require.Equal(t, claimer, c.Context)
	require.Equal(t, "one", string(cb[:c.Len]))
	require.ErrorIs(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: [][]byte{cb}, Context: claimer}, fi.CLAIM), fi.EINVAL,
		"a claim is received once")

	// Claim the rendezvous message, then receive it: it moves now.
	claimer2 := &peekCtx{2}
	peek(2, 0, nil, claimer2, fi.PEEK|fi.CLAIM)
	comp(t, b.rxCQ)
	noComp(t, a.txCQ)
	bigBuf := make([]byte, len(big))
	require.NoError(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: [][]byte{bigBuf[:100], bigBuf[100:]}, Context: claimer2}, fi.CLAIM))
	c = comp(t, b.rxCQ)
	require.Equal(t, len(big), c.Len)
	require.Equal(t, big, bigBuf)
	require.Equal(t, "s2", comp(t, a.txCQ).Context)

	// Peek+discard, eager and rendezvous: reported, then gone; the
	// rendezvous sender completes.
	send([]byte("drop me"), 3, "s3")
	comp(t, a.txCQ)
	send(big, 4, "s4")
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 2 }, waitMs*time.Millisecond, time.Millisecond)
	peek(3, 0, make([]byte, 10), "d3", fi.PEEK|fi.DISCARD)
	c = comp(t, b.rxCQ)
	require.Equal(t, 7, c.Len)
	require.Nil(t, c.Buf, "FI_DISCARD ignores the buffers")
	peek(4, 0, nil, "d4", fi.PEEK|fi.DISCARD)
	require.Equal(t, len(big), comp(t, b.rxCQ).Len)
	require.Equal(t, "s4", comp(t, a.txCQ).Context, "a discarded rendezvous send completes")
	require.Equal(t, 0, b.ep.Unexpected())

	// Claim+discard.
	send([]byte("claimed, dropped"), 5, "s5")
	comp(t, a.txCQ)
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 1 }, waitMs*time.Millisecond, time.Millisecond)
	claimer3 := &peekCtx{3}
	peek(5, 0, nil, claimer3, fi.PEEK|fi.CLAIM)
	comp(t, b.rxCQ)
	require.NoError(t, b.ep.TRecvMsg(&fabric.MsgTagged{Context: claimer3}, fi.CLAIM|fi.DISCARD))
	c = comp(t, b.rxCQ)
	require.Equal(t, claimer3, c.Context)
	require.Equal(t, 16, c.Len)
	require.Equal(t, 0, b.ep.Unexpected())

	// The plain receive for tag 1 still waits; the next message takes it.
	send([]byte("next"), 1, nil)
	comp(t, a.txCQ)
	c = comp(t, b.rxCQ)
	require.Equal(t, "plain", c.Context)
	require.Equal(t, "next", string(rb[:c.Len]))
	noComp(t, b.rxCQ)
}
