package fabric_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

var taggedCQ = &fabric.CQAttr{WaitObj: fi.WaitUnspec, Format: fabric.CQFormatTagged}

// taggedPair is two linked loopback sides whose CQs report tags.
func taggedPair(t testing.TB, oa, ob sideOpts) (*side, *side) {
	t.Helper()
	oa.txCQ, oa.rxCQ, ob.txCQ, ob.rxCQ = taggedCQ, taggedCQ, taggedCQ, taggedCQ
	return pair(t, oa, ob)
}

// fill returns n bytes that differ with seed and position.
func fill(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + seed*17 + i>>9)
	}
	return b
}

// TestTaggedSendRecv: every tagged call, with the completion fields
// fi_tagged(3) and fi_cq(3) name: FI_TAGGED with FI_SEND or FI_RECV, the
// tag, the length, remote CQ data with FI_REMOTE_CQ_DATA, the source.
func TestTaggedSendRecv(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	const tag = 0xfeed_0000_0000_0001

	// fi_tsend / fi_trecv.
	rbuf := make([]byte, 64)
	require.NoError(t, b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, tag, 0, "r1"))
	require.NoError(t, a.ep.TSend([]byte("hello"), mr.Desc{}, a.peer, tag, "s1"))
	s := comp(t, a.txCQ)
	require.Equal(t, "s1", s.Context)
	require.Equal(t, fi.SEND|fi.TAGGED, s.Flags)
	r, src := compFrom(t, b.rxCQ)
	require.Equal(t, "r1", r.Context)
	require.Equal(t, fi.RECV|fi.TAGGED, r.Flags)
	require.Equal(t, uint64(tag), r.Tag)
	require.Equal(t, 5, r.Len)
	require.Equal(t, "hello", string(rbuf[:r.Len]))
	require.Equal(t, b.peer, src)

	// fi_tsenddata, matched by a wildcard: the completion carries the
	// message's tag, not the receive's.
	require.NoError(t, b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), "any"))
	require.NoError(t, a.ep.TSendData([]byte("data"), mr.Desc{}, 0xabc, a.peer, 77, "s2"))
	comp(t, a.txCQ)
	r = comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.TAGGED|fi.REMOTE_CQ_DATA, r.Flags)
	require.Equal(t, uint64(77), r.Tag)
	require.Equal(t, uint64(0xabc), r.Data)

	// fi_tinject and fi_tinjectdata: no send completion.
	require.NoError(t, b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 5, 0, "inj"))
	require.NoError(t, b.ep.TRecv(rbuf[32:], mr.Desc{}, fi.AddrUnspec, 6, 0, "injdata"))
	require.NoError(t, a.ep.TInject([]byte("i5"), a.peer, 5))
	require.NoError(t, a.ep.TInjectData([]byte("i6"), 0x66, a.peer, 6))
	r = comp(t, b.rxCQ)
	require.Equal(t, "inj", r.Context)
	require.Equal(t, uint64(5), r.Tag)
	r = comp(t, b.rxCQ)
	require.Equal(t, "injdata", r.Context)
	require.Equal(t, fi.RECV|fi.TAGGED|fi.REMOTE_CQ_DATA, r.Flags)
	require.Equal(t, uint64(0x66), r.Data)
	noComp(t, a.txCQ)

	// fi_tsendv / fi_trecvv, split differently on both sides.
	msg := fill(3000, 1)
	riov := [][]byte{make([]byte, 7), make([]byte, 1000), make([]byte, 2500)}
	require.NoError(t, b.ep.TRecvV(riov, nil, fi.AddrUnspec, 9, 0, "v"))
	require.NoError(t, a.ep.TSendV([][]byte{msg[:1], msg[1:2000], msg[2000:]}, nil, a.peer, 9, "sv"))
	comp(t, a.txCQ)
	r = comp(t, b.rxCQ)
	require.Equal(t, 3000, r.Len)
	require.Equal(t, msg, bytes.Join(riov, nil)[:3000])

	// fi_tsendmsg / fi_trecvmsg with flags and data.
	require.NoError(t, b.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: [][]byte{rbuf}, Addr: fi.AddrUnspec, Tag: 0x10, Ignore: 0x0f,
		Context: "m"}, fi.COMPLETION))
	require.NoError(t, a.ep.TSendMsg(&fabric.MsgTagged{MsgIOV: [][]byte{[]byte("ms"), []byte("g")}, Addr: a.peer, Tag: 0x1f,
		Context: "sm", Data: 9}, fi.REMOTE_CQ_DATA|fi.COMPLETION))
	require.Equal(t, "sm", comp(t, a.txCQ).Context)
	r = comp(t, b.rxCQ)
	require.Equal(t, "m", r.Context)
	require.Equal(t, uint64(0x1f), r.Tag)
	require.Equal(t, uint64(9), r.Data)
	require.Equal(t, "msg", string(rbuf[:r.Len]))

	// fi_tsendmsg with FI_INJECT: the buffer may change at once.
	ibuf := []byte("inject")
	require.NoError(t, b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 1, 0, "ri"))
	require.NoError(t, a.ep.TSendMsg(&fabric.MsgTagged{MsgIOV: [][]byte{ibuf}, Addr: a.peer, Tag: 1, Context: "si"}, fi.INJECT))
	copy(ibuf, "XXXXXX")
	comp(t, a.txCQ)
	r = comp(t, b.rxCQ)
	require.Equal(t, "inject", string(rbuf[:r.Len]))
}

// TestTagMatching: the matching rules of fi_tagged(3): tags equal outside
// the ignore bits; posted receives searched in posting order, the first
// match taking the message; messages from one sender matched in send
// order; tagged and untagged queues separate; a message with an unknown
// tag waits, unexpected, for a receive that takes it.
func TestTagMatching(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	buf := func() []byte { return make([]byte, 16) }

	// Posted order, first match: two receives take tag 0x12; the older
	// gets the first message.
	require.NoError(t, b.ep.TRecv(buf(), mr.Desc{}, fi.AddrUnspec, 0x10, 0x0f, "wild"))
	require.NoError(t, b.ep.TRecv(buf(), mr.Desc{}, fi.AddrUnspec, 0x12, 0, "exact"))
	require.NoError(t, b.ep.TRecv(buf(), mr.Desc{}, fi.AddrUnspec, 0x99, 0, "other"))
	require.NoError(t, b.ep.Recv(buf(), mr.Desc{}, fi.AddrUnspec, "untagged"))
	for i := range 2 {
		require.NoError(t, a.ep.TSend([]byte{byte(i)}, mr.Desc{}, a.peer, 0x12, nil))
		comp(t, a.txCQ)
	}
	require.Equal(t, "wild", comp(t, b.rxCQ).Context)
	require.Equal(t, "exact", comp(t, b.rxCQ).Context)
	noComp(t, b.rxCQ)

	// Untagged traffic does not see tagged receives and vice versa.
	require.NoError(t, a.ep.Send([]byte("u"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	require.Equal(t, "untagged", comp(t, b.rxCQ).Context)

	// A tag nobody posted for waits unexpected; 0x99's receive stays.
	require.NoError(t, a.ep.TSend([]byte("late"), mr.Desc{}, a.peer, 0x55, nil))
	comp(t, a.txCQ)
	noComp(t, b.rxCQ)
	require.Equal(t, 1, b.ep.Unexpected())
	// An untagged receive does not take it.
	require.NoError(t, b.ep.Recv(buf(), mr.Desc{}, fi.AddrUnspec, "u2"))
	noComp(t, b.rxCQ)
	rb := buf()
	require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 0x50, 0x0f, "late"))
	r := comp(t, b.rxCQ)
	require.Equal(t, "late", r.Context)
	require.Equal(t, uint64(0x55), r.Tag)
	require.Equal(t, "late", string(rb[:r.Len]))

	// Unexpected messages from one sender are taken in send order by
	// wildcard receives; an exact receive skips over non-matching ones.
	for i := range 6 {
		require.NoError(t, a.ep.TSend([]byte{byte(i)}, mr.Desc{}, a.peer, uint64(100+i%3), nil))
		comp(t, a.txCQ)
	}
	require.Eventually(t, func() bool { return b.ep.Unexpected() == 6 }, waitMs*time.Millisecond, time.Millisecond)
	rb = buf()
	require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 102, 0, "exact102"))
	r = comp(t, b.rxCQ)
	require.Equal(t, byte(2), rb[0], "the oldest message tagged 102")
	for _, want := range []byte{0, 1, 3, 4, 5} {
		rb := buf()
		require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), nil))
		r = comp(t, b.rxCQ)
		require.Equal(t, want, rb[0], "wildcards take the rest in send order")
		require.Equal(t, uint64(100+int(want)%3), r.Tag)
	}
	require.Equal(t, 0, b.ep.Unexpected())
	// Clean up the untagged receive and 0x99's.
	require.NoError(t, b.ep.Cancel("u2"))
	require.NoError(t, b.ep.Cancel("other"))
	require.Equal(t, fi.ECANCELED, errComp(t, b.rxCQ).Err)
	require.Equal(t, fi.ECANCELED, errComp(t, b.rxCQ).Err)
}

// TestTaggedDirectedRecv: with FI_DIRECTED_RECV a receive's source
// selects the sender; without it the source is ignored (fi_tagged(3)).
func TestTaggedDirectedRecv(t *testing.T) {
	for _, caps := range []fi.Flags{0, fi.MSG | fi.TAGGED | fi.DIRECTED_RECV, fi.MSG | fi.TAGGED} {
		t.Run(fmt.Sprintf("caps=%#x", uint64(caps)), func(t *testing.T) {
			a, b := taggedPair(t, sideOpts{}, sideOpts{ep: fabric.EPAttr{Caps: caps}})
			c := newSide(t, sideOpts{txCQ: taggedCQ, rxCQ: taggedCQ})
			c.peer = c.insert(t, b.ep.GetName())
			fromC := b.insert(t, c.ep.GetName())
			directed := caps == 0 || caps&fi.DIRECTED_RECV != 0
			rb := make([]byte, 8)
			require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fromC, 1, 0, "fromC"))
			require.NoError(t, a.ep.TSend([]byte("a"), mr.Desc{}, a.peer, 1, nil))
			comp(t, a.txCQ)
			if directed {
				noComp(t, b.rxCQ)
				require.NoError(t, c.ep.TSend([]byte("c"), mr.Desc{}, c.peer, 1, nil))
				comp(t, c.txCQ)
				r, src := compFrom(t, b.rxCQ)
				require.Equal(t, "fromC", r.Context)
				require.Equal(t, fromC, src)
				require.Equal(t, "c", string(rb[:1]))
				// a's message is still waiting.
				require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, b.peer, 1, 0, "fromA"))
				require.Equal(t, "fromA", comp(t, b.rxCQ).Context)
				require.Equal(t, "a", string(rb[:1]))
			} else {
				r, src := compFrom(t, b.rxCQ)
				require.Equal(t, "fromC", r.Context, "the source is ignored without FI_DIRECTED_RECV")
				require.Equal(t, b.peer, src)
			}
		})
	}
}

// TestDirectedRecvPeerInsertedLate: a message that arrived while its
// sender was not in the receiver's AV (an MPI rank that starts sending
// before its peer has inserted it) waits unexpected and is taken by a
// directed receive naming the sender's fi_addr once it is inserted; the
// completion reports that fi_addr. Tagged and untagged, eager and
// rendezvous.
func TestDirectedRecvPeerInsertedLate(t *testing.T) {
	for _, size := range []int{5, 3 * fabric.DefaultEagerLimit} {
		for _, tagged := range []bool{true, false} {
			t.Run(fmt.Sprintf("tagged=%v/size=%d", tagged, size), func(t *testing.T) {
				b := newSide(t, sideOpts{txCQ: taggedCQ, rxCQ: taggedCQ,
					ep: fabric.EPAttr{AcceptUnknown: true, Caps: fi.MSG | fi.TAGGED | fi.DIRECTED_RECV}})
				a := newSide(t, sideOpts{txCQ: taggedCQ, rxCQ: taggedCQ})
				a.peer = a.insert(t, b.ep.GetName())
				msg := fill(size, 3)
				if tagged {
					require.NoError(t, a.ep.TSend(msg, mr.Desc{}, a.peer, 9, "sent"))
				} else {
					require.NoError(t, a.ep.Send(msg, mr.Desc{}, a.peer, "sent"))
				}
				if size <= fabric.DefaultEagerLimit {
					comp(t, a.txCQ)
				}
				waitUnexpected(t, b, 1)
				fromA := b.insert(t, a.ep.GetName())
				got := make([]byte, size)
				if tagged {
					require.NoError(t, b.ep.TRecv(got, mr.Desc{}, fromA, 9, 0, "recv"))
				} else {
					require.NoError(t, b.ep.Recv(got, mr.Desc{}, fromA, "recv"))
				}
				r, src := compFrom(t, b.rxCQ)
				require.Equal(t, "recv", r.Context)
				require.Equal(t, fromA, src)
				require.Equal(t, msg, got)
				if size > fabric.DefaultEagerLimit {
					comp(t, a.txCQ)
				}
			})
		}
	}
}

// waitUnexpected waits until s's endpoint holds n unexpected messages.
func waitUnexpected(t testing.TB, s *side, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.ep.Unexpected() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d unexpected messages, want %d", s.ep.Unexpected(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTaggedBadInput: wrong arguments fail at once with the libfabric
// error, and nothing is posted.
func TestTaggedBadInput(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	nine := make([][]byte, fabric.IovLimit+1)
	for i := range nine {
		nine[i] = make([]byte, 1)
	}
	cases := []struct {
		name string
		err  error
		want fi.Errno
	}{
		{"tsendv over iov_limit", a.ep.TSendV(nine, nil, a.peer, 1, nil), fi.EINVAL},
		{"trecvv over iov_limit", b.ep.TRecvV(nine, nil, fi.AddrUnspec, 1, 0, nil), fi.EINVAL},
		{"recvv over iov_limit", b.ep.RecvV(nine, nil, fi.AddrUnspec, nil), fi.EINVAL},
		{"tsendv desc count", a.ep.TSendV(nine[:2], make([]mr.Desc, 1), a.peer, 1, nil), fi.EINVAL},
		{"trecvv desc count", b.ep.TRecvV(nine[:3], make([]mr.Desc, 2), fi.AddrUnspec, 1, 0, nil), fi.EINVAL},
		{"tsendmsg nil", a.ep.TSendMsg(nil, 0), fi.EINVAL},
		{"trecvmsg nil", b.ep.TRecvMsg(nil, 0), fi.EINVAL},
		{"recvmsg nil", b.ep.RecvMsg(nil, 0), fi.EINVAL},
		{"tsendmsg flags", a.ep.TSendMsg(&fabric.MsgTagged{Addr: a.peer}, fi.PEEK), fi.EBADFLAGS},
		{"trecvmsg flags", b.ep.TRecvMsg(&fabric.MsgTagged{}, fi.MULTI_RECV), fi.EBADFLAGS},
		{"recvmsg flags", b.ep.RecvMsg(&fabric.Msg{}, fi.PEEK), fi.EBADFLAGS},
		{"multi-recv of two buffers", b.ep.RecvMsg(&fabric.Msg{MsgIOV: nine[:2]}, fi.MULTI_RECV), fi.EINVAL},
		{"discard alone", b.ep.TRecvMsg(&fabric.MsgTagged{}, fi.DISCARD), fi.EINVAL},
		{"claim of nothing", b.ep.TRecvMsg(&fabric.MsgTagged{Context: "nothing"}, fi.CLAIM), fi.EINVAL},
		{"claim without context", b.ep.TRecvMsg(&fabric.MsgTagged{}, fi.PEEK|fi.CLAIM), fi.EINVAL},
		{"claim with a slice context", b.ep.TRecvMsg(&fabric.MsgTagged{Context: []int{1}}, fi.PEEK|fi.CLAIM), fi.EINVAL},
		{"tinject too big", a.ep.TInject(make([]byte, a.ep.InjectSize()+1), a.peer, 1), fi.EMSGSIZE},
		{"tinjectdata too big", a.ep.TInjectData(make([]byte, a.ep.InjectSize()+1), 1, a.peer, 1), fi.EMSGSIZE},
		{"tsendmsg inject too big", a.ep.TSendMsg(&fabric.MsgTagged{MsgIOV: [][]byte{make([]byte, a.ep.InjectSize()+1)},
			Addr: a.peer}, fi.INJECT), fi.EMSGSIZE},
		{"tsendv over max_msg_size", a.ep.TSendV([][]byte{make([]byte, fabric.MaxMsgSize), {1}}, nil, a.peer, 1, nil), fi.EMSGSIZE},
		{"tsend to an unknown address", a.ep.TSend([]byte("x"), mr.Desc{}, 12345, 1, nil), fi.EADDRNOTAVAIL},
		{"cancel without context", b.ep.Cancel(nil), fi.EINVAL},
		{"cancel with a slice context", b.ep.Cancel([]byte("x")), fi.EINVAL},
	}
	for _, c := range cases {
		require.ErrorIs(t, c.err, c.want, c.name)
	}
	require.Zero(t, b.ep.PostedReceives())
	noComp(t, a.txCQ)
	noComp(t, b.rxCQ)

	// Not enabled: FI_EOPBADSTATE.
	n := newSide(t, sideOpts{noEnable: true, rxCQ: taggedCQ})
	require.ErrorIs(t, n.ep.TRecv(nil, mr.Desc{}, fi.AddrUnspec, 0, 0, nil), fi.EOPBADSTATE)
	require.ErrorIs(t, n.ep.TSend(nil, mr.Desc{}, 0, 0, nil), fi.EOPBADSTATE)
	require.ErrorIs(t, n.ep.Cancel("x"), fi.EOPBADSTATE)
	require.ErrorIs(t, n.ep.TRecvMsg(&fabric.MsgTagged{}, fi.PEEK), fi.EOPBADSTATE)
}

// TestTaggedTruncation: a tagged message longer than its receive fills
// it and completes with FI_ETRUNC, the overflow in OLen, the tag set; for
// an eager and a rendezvous message.
func TestTaggedTruncation(t *testing.T) {
	a, b := taggedPair(t, sideOpts{}, sideOpts{})
	for _, size := range []int{100, fabric.DefaultEagerLimit + 1000} {
		msg := fill(size, size)
		rb := make([]byte, size/2)
		require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 3, 0, size))
		require.NoError(t, a.ep.TSend(msg, mr.Desc{}, a.peer, 3, nil))
		comp(t, a.txCQ)
		e := errComp(t, b.rxCQ)
		require.Equal(t, fi.ETRUNC, e.Err)
		require.Equal(t, size, e.Context)
		require.Equal(t, size/2, e.Len)
		require.Equal(t, size-size/2, e.OLen)
		require.Equal(t, uint64(3), e.Tag)
		require.Equal(t, fi.RECV|fi.TAGGED, e.Flags)
		require.Equal(t, msg[:size/2], rb)
	}
}
