package fabric_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// splitAt cuts b into pieces of the given lengths (the last takes the rest).
func splitAt(b []byte, lens ...int) [][]byte {
	var out [][]byte
	for _, n := range lens {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// FI_CLAIM and FI_DISCARD (fabric.h), which xdpfab does not offer.
const (
	flagClaim   fi.Flags = 1 << 59
	flagDiscard fi.Flags = 1 << 58
)

func patterned(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + seed)
	}
	return b
}

// TestSendVRecvV: fi_sendv gathers its buffers into one message, fi_recvv
// scatters one across its buffers, also when the pieces do not line up and
// the message is segmented; a vector too small truncates (FI_ETRUNC, olen).
func TestSendVRecvV(t *testing.T) {
	a, b := pair(t, sideOpts{cntrs: fi.SEND}, sideOpts{cntrs: fi.RECV})
	for _, size := range []int{0, 5, 1000, 3 * a.ep.MaxPacket(), 200 << 10} {
		msg := patterned(size, size)
		rb := make([]byte, size+64)
		riov := splitAt(rb, min(7, size), size/2)
		require.NoError(t, b.ep.RecvV(riov, nil, fi.AddrUnspec, "r"))
		siov := splitAt(bytes.Clone(msg), size/3, size/3)
		require.NoError(t, a.ep.SendV(siov, nil, a.peer, "s"))
		tx := comp(t, a.txCQ)
		require.Equal(t, fabric.CQEntry{Context: "s", Flags: fi.SEND | fi.MSG, Len: size}, tx)
		rx := comp(t, b.rxCQ)
		require.Equal(t, "r", rx.Context)
		require.Equal(t, fi.RECV|fi.MSG, rx.Flags)
		require.Equal(t, size, rx.Len)
		require.Equal(t, msg, rb[:size], "%d bytes scattered intact", size)
		require.Equal(t, make([]byte, 64), rb[size:], "nothing past the message")
		if size > 0 {
			require.Same(t, &rb[0], &rx.Buf[0], "Buf points into the first buffer")
			require.LessOrEqual(t, len(rx.Buf), len(riov[0]))
		}
	}
	// Truncation across buffers.
	rb := make([]byte, 10)
	require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: splitAt(rb, 3, 3), Addr: fi.AddrUnspec, Context: "t"}, 0))
	require.NoError(t, a.ep.SendV([][]byte{[]byte("0123456"), []byte("789abcdef")}, nil, a.peer, "s"))
	comp(t, a.txCQ)
	e := errComp(t, b.rxCQ)
	require.ErrorIs(t, e.Err, fi.ETRUNC)
	require.Equal(t, 10, e.Len)
	require.Equal(t, 6, e.OLen)
	require.Equal(t, "t", e.Context)
	require.Equal(t, "0123456789", string(rb))
	require.Equal(t, [2]uint64{6, 0}, [2]uint64{a.cntr[fi.SEND].Read(), a.cntr[fi.SEND].ReadErr()})
	require.Equal(t, [2]uint64{5, 1}, [2]uint64{b.cntr[fi.RECV].Read(), b.cntr[fi.RECV].ReadErr()})

	// An unexpected message scattered into a vector posted later.
	require.NoError(t, a.ep.SendV([][]byte{[]byte("early"), []byte(" bird")}, nil, a.peer, "s"))
	comp(t, a.txCQ)
	rb = make([]byte, 10)
	require.NoError(t, b.ep.RecvV(splitAt(rb, 2, 2), nil, fi.AddrUnspec, "late"))
	require.Equal(t, 10, comp(t, b.rxCQ).Len)
	require.Equal(t, "early bird", string(rb))
}

// TestMsgPostingErrors: bad vectors, bad flags and a nil msg are refused
// at the call with the libfabric errno, and nothing is sent.
func TestMsgPostingErrors(t *testing.T) {
	a, b := pair(t, sideOpts{cntrs: fi.SEND | fi.WRITE | fi.READ}, sideOpts{})
	nine := make([][]byte, fabric.IovLimit+1)
	for i := range nine {
		nine[i] = []byte{byte(i)}
	}
	require.ErrorIs(t, a.ep.SendV(nine, nil, a.peer, nil), fi.EINVAL, "count > iov_limit")
	require.ErrorIs(t, b.ep.RecvV(nine, nil, fi.AddrUnspec, nil), fi.EINVAL)
	require.ErrorIs(t, a.ep.WriteV(nine, nil, a.peer, 0, regionKey, nil), fi.EINVAL)
	require.ErrorIs(t, a.ep.ReadV(nine, nil, a.peer, 0, regionKey, nil), fi.EINVAL)
	two := [][]byte{[]byte("a"), []byte("b")}
	require.ErrorIs(t, a.ep.SendV(two, []mr.Desc{{}}, a.peer, nil), fi.EINVAL, "fewer descriptors than buffers")
	require.ErrorIs(t, b.ep.RecvV(two, []mr.Desc{{}}, fi.AddrUnspec, nil), fi.EINVAL)
	require.ErrorIs(t, a.ep.SendMsg(nil, 0), fi.EINVAL)
	require.ErrorIs(t, b.ep.RecvMsg(nil, 0), fi.EINVAL)
	require.ErrorIs(t, a.ep.WriteMsg(nil, 0), fi.EINVAL)
	require.ErrorIs(t, a.ep.ReadMsg(nil, 0), fi.EINVAL)
	m := &fabric.Msg{MsgIOV: two, Addr: a.peer}
	for _, f := range []fi.Flags{fi.MULTICAST, fi.MATCH_COMPLETE, fi.COMMIT_COMPLETE, fi.TAGGED, flagClaim, fi.MULTI_RECV} {
		require.ErrorIs(t, a.ep.SendMsg(m, f), fi.EBADFLAGS, "sendmsg %#x", uint64(f))
		require.ErrorIs(t, a.ep.WriteMsg(rmaMsg([]byte("x"), a.peer, 0, regionKey, nil, 0), f), fi.EBADFLAGS)
		require.ErrorIs(t, a.ep.ReadMsg(rmaMsg([]byte("x"), a.peer, 0, regionKey, nil, 0), f), fi.EBADFLAGS)
	}
	for _, f := range []fi.Flags{fi.REMOTE_CQ_DATA, fi.INJECT} {
		require.ErrorIs(t, a.ep.ReadMsg(rmaMsg([]byte("x"), a.peer, 0, regionKey, nil, 0), f), fi.EBADFLAGS,
			"readmsg %#x applies to writes", uint64(f))
	}
	rm := &fabric.Msg{MsgIOV: two, Addr: fi.AddrUnspec}
	for _, f := range []fi.Flags{fi.REMOTE_CQ_DATA, fi.INJECT, fi.FENCE, flagClaim, flagDiscard, fi.MULTICAST} {
		require.ErrorIs(t, b.ep.RecvMsg(rm, f), fi.EBADFLAGS, "recvmsg %#x", uint64(f))
	}
	require.ErrorIs(t, b.ep.RecvMsg(rm, fi.MULTI_RECV), fi.EOPNOTSUPP)
	big := make([]byte, a.ep.InjectSize()+1)
	require.ErrorIs(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: splitAt(big, 10), Addr: a.peer}, fi.INJECT), fi.EMSGSIZE)
	require.ErrorIs(t, a.ep.InjectData(big, 1, a.peer), fi.EMSGSIZE)
	require.ErrorIs(t, a.ep.InjectWriteData(big, 1, a.peer, 0, regionKey), fi.EMSGSIZE)
	require.ErrorIs(t, a.ep.WriteMsg(rmaMsg(big, a.peer, 0, regionKey, nil, 0), fi.INJECT), fi.EMSGSIZE)

	// fi_msg_rma: exactly one remote iovec (rma_iov_limit 1) whose length
	// matches the local buffers.
	rma := func(riov ...fabric.RMAIov) *fabric.MsgRMA {
		return &fabric.MsgRMA{MsgIOV: two, Addr: a.peer, RMAIOV: riov}
	}
	r := fabric.RMAIov{Addr: 0, Len: 2, Key: regionKey}
	require.ErrorIs(t, a.ep.WriteMsg(rma(), 0), fi.EINVAL, "no remote iovec")
	require.ErrorIs(t, a.ep.WriteMsg(rma(r, r), 0), fi.EINVAL, "rma_iov_count > rma_iov_limit")
	require.ErrorIs(t, a.ep.ReadMsg(rma(r, r), 0), fi.EINVAL)
	for _, l := range []int{-1, 1, 3} {
		bad := r
		bad.Len = l
		require.ErrorIs(t, a.ep.WriteMsg(rma(bad), 0), fi.EINVAL, "remote length %d for 2 local bytes", l)
		require.ErrorIs(t, a.ep.ReadMsg(rma(bad), 0), fi.EINVAL)
	}
	// Nothing was accepted: no completion, no count.
	noComp(t, a.txCQ)
	noComp(t, b.rxCQ)
	for k, c := range a.cntr {
		require.Equal(t, [2]uint64{}, [2]uint64{c.Read(), c.ReadErr()}, "counter %v", fiFlagName(k))
	}
	// And the well-formed forms of the same calls work.
	require.NoError(t, a.ep.WriteMsg(rma(r), 0))
	comp(t, a.txCQ)
}

// TestSendMsgFlags: fi_sendmsg's flags: remote CQ data only with
// FI_REMOTE_CQ_DATA, FI_INJECT frees the buffers at return, the completion
// levels and FI_FENCE are accepted and complete; fi_injectdata generates
// no completion at the sender.
func TestSendMsgFlags(t *testing.T) {
	a, b := pair(t, sideOpts{cntrs: fi.SEND}, sideOpts{})
	recv := func(ctx string) []byte {
		rb := make([]byte, 64)
		require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{rb}, Addr: fi.AddrUnspec, Context: ctx}, 0))
		return rb
	}
	rb := recv("r1")
	require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{[]byte("data")}, Addr: a.peer, Context: "s1", Data: 0xd1}, fi.REMOTE_CQ_DATA))
	require.Equal(t, "s1", comp(t, a.txCQ).Context)
	e := comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.MSG|fi.REMOTE_CQ_DATA, e.Flags)
	require.Equal(t, uint64(0xd1), e.Data)
	require.Equal(t, "data", string(rb[:e.Len]))

	recv("r2")
	require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{[]byte("no data")}, Addr: a.peer, Context: "s2", Data: 0xd2}, 0))
	comp(t, a.txCQ)
	e = comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.MSG, e.Flags, "Data without FI_REMOTE_CQ_DATA is not sent")
	require.Zero(t, e.Data)

	// FI_INJECT: the buffers may be overwritten as soon as the call
	// returns; the message still completes.
	rb = recv("r3")
	p1, p2 := []byte("inj"), []byte("ected")
	require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{p1, p2}, Addr: a.peer, Context: "s3"}, fi.INJECT|fi.COMPLETION))
	copy(p1, "XXX")
	copy(p2, "YYYYY")
	require.Equal(t, "s3", comp(t, a.txCQ).Context)
	require.Equal(t, "injected", string(rb[:comp(t, b.rxCQ).Len]))

	// Every completion level, FI_FENCE and FI_MORE complete, in order.
	levels := []fi.Flags{fi.INJECT_COMPLETE, fi.TRANSMIT_COMPLETE, fi.DELIVERY_COMPLETE,
		fi.FENCE | fi.DELIVERY_COMPLETE, fi.MORE, fi.FENCE}
	bufs := make([][]byte, len(levels))
	for i := range levels {
		bufs[i] = recv("level")
	}
	for i, f := range levels {
		require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{{byte(i)}}, Addr: a.peer, Context: i}, f))
	}
	for i := range levels {
		require.Equal(t, i, comp(t, a.txCQ).Context, "flags %#x", uint64(levels[i]))
	}
	for i := range levels {
		comp(t, b.rxCQ)
		require.Equal(t, byte(i), bufs[i][0])
	}

	// fi_injectdata: no sender completion, the counter counts, the data
	// arrives.
	rb = recv("r4")
	n := a.cntr[fi.SEND].Read()
	require.NoError(t, a.ep.InjectData([]byte("injdata"), 0xd4, a.peer))
	e = comp(t, b.rxCQ)
	require.Equal(t, fi.RECV|fi.MSG|fi.REMOTE_CQ_DATA, e.Flags)
	require.Equal(t, uint64(0xd4), e.Data)
	require.Equal(t, "injdata", string(rb[:e.Len]))
	require.NoError(t, a.cntr[fi.SEND].Wait(n+1, waitMs))
	noComp(t, a.txCQ)
}

// TestWriteVReadV: fi_writev/fi_readv and the msg forms move the bytes of
// several local buffers to and from one remote range; fi_writedata and
// fi_inject_writedata make a target completion with the data; every one
// advances the initiator's and the target's counters once.
func TestWriteVReadV(t *testing.T) {
	all := fi.READ | fi.WRITE | fi.REMOTE_READ | fi.REMOTE_WRITE
	a, b := pair(t, sideOpts{cntrs: all}, sideOpts{cntrs: all})
	for i, size := range []int{3, 1000, 3*a.ep.MaxPacket() + 5, 300 << 10} {
		off := uint64(100 + i*7)
		data := patterned(size, i)
		before := [2]map[fi.Flags][2]uint64{cntrValues(a), cntrValues(b)}
		require.NoError(t, a.ep.WriteV(splitAt(bytes.Clone(data), 1, size/2), nil, a.peer, off, regionKey, "wv"))
		require.Equal(t, fabric.CQEntry{Context: "wv", Flags: fi.RMA | fi.WRITE, Len: size}, comp(t, a.txCQ))
		got := make([]byte, size+2)
		riov := splitAt(got[1:size+1], size/3, 1)
		require.NoError(t, a.ep.ReadV(riov, nil, a.peer, off, regionKey, "rv"))
		require.Equal(t, fabric.CQEntry{Context: "rv", Flags: fi.RMA | fi.READ, Len: size}, comp(t, a.txCQ))
		require.Equal(t, data, got[1:size+1])
		require.Zero(t, got[0]+got[size+1], "nothing outside the buffers")
		ok := [2]uint64{1, 0}
		expectCounts(t, a, before[0], map[fi.Flags][2]uint64{fi.WRITE: ok, fi.READ: ok}, "writev+readv initiator")
		expectCounts(t, b, before[1], map[fi.Flags][2]uint64{fi.REMOTE_WRITE: ok, fi.REMOTE_READ: ok}, "writev+readv target")
	}

	// The msg forms, with one local buffer and with several.
	w := &fabric.MsgRMA{MsgIOV: [][]byte{[]byte("hello, "), []byte("world")}, Addr: a.peer,
		RMAIOV: []fabric.RMAIov{{Addr: 5000, Len: 12, Key: regionKey}}, Context: "wm", Data: 0xaa}
	require.NoError(t, a.ep.WriteMsg(w, fi.REMOTE_CQ_DATA|fi.TRANSMIT_COMPLETE))
	require.Equal(t, "wm", comp(t, a.txCQ).Context)
	e, src := compFrom(t, b.rxCQ)
	require.Equal(t, fabric.CQEntry{Flags: fi.RMA | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xaa}, e)
	require.Equal(t, b.peer, src)
	require.Equal(t, "hello, world", string(b.mem[5000:5012]))
	r1, r2 := make([]byte, 5), make([]byte, 7)
	rm := &fabric.MsgRMA{MsgIOV: [][]byte{r1, r2}, Addr: a.peer,
		RMAIOV: []fabric.RMAIov{{Addr: 5000, Len: 12, Key: regionKey}}, Context: "rm"}
	require.NoError(t, a.ep.ReadMsg(rm, fi.DELIVERY_COMPLETE))
	require.Equal(t, "rm", comp(t, a.txCQ).Context)
	require.Equal(t, "hello", string(r1))
	require.Equal(t, ", world", string(r2))

	// fi_writedata and fi_inject_writedata.
	require.NoError(t, a.ep.WriteData([]byte("wd"), mr.Desc{}, 0xbb, a.peer, 6000, regionKey, "wd"))
	require.Equal(t, fabric.CQEntry{Context: "wd", Flags: fi.RMA | fi.WRITE, Len: 2}, comp(t, a.txCQ))
	require.Equal(t, fabric.CQEntry{Flags: fi.RMA | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xbb}, comp(t, b.rxCQ))
	require.Equal(t, "wd", string(b.mem[6000:6002]))
	inj := []byte("iwd")
	require.NoError(t, a.ep.InjectWriteData(inj, 0xcc, a.peer, 6100, regionKey))
	copy(inj, "XXX") // the buffer is free at return
	require.Equal(t, fabric.CQEntry{Flags: fi.RMA | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xcc}, comp(t, b.rxCQ))
	require.Equal(t, "iwd", string(b.mem[6100:6103]))
	noComp(t, a.txCQ) // an inject call never completes

	// A failing vectored read (past the region) completes in error,
	// counts as an error and leaves the buffers alone.
	r1[0] = 'k'
	require.NoError(t, a.ep.ReadV([][]byte{r1, r2}, nil, a.peer, uint64(len(b.mem)-4), regionKey, "bad"))
	ee := errComp(t, a.txCQ)
	require.Equal(t, "bad", ee.Context)
	require.Equal(t, byte('k'), r1[0])
}

// TestFence: a fenced read after a burst of writes to the same peer waits
// for them and sees all of their data; fenced sends and writes complete in
// posting order with the operations around them.
func TestFence(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	const n = 64
	for i := range n {
		require.NoError(t, a.ep.Write(bytes.Repeat([]byte{byte(i + 1)}, 512), mr.Desc{}, a.peer, uint64(i*512), regionKey, i))
	}
	got := make([]byte, n*512)
	require.NoError(t, a.ep.ReadMsg(rmaMsg(got, a.peer, 0, regionKey, "fenced", 0), fi.FENCE|fi.DELIVERY_COMPLETE))
	rb := make([]byte, 8)
	require.NoError(t, b.ep.Recv(rb, mr.Desc{}, fi.AddrUnspec, "r"))
	require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{[]byte("after")}, Addr: a.peer, Context: "send"}, fi.FENCE))
	require.NoError(t, a.ep.WriteMsg(rmaMsg([]byte{0xee}, a.peer, 0, regionKey, "write", 0), fi.FENCE))
	for i := range n {
		require.Equal(t, i, comp(t, a.txCQ).Context)
	}
	require.Equal(t, "fenced", comp(t, a.txCQ).Context)
	for i := range n {
		require.Equal(t, bytes.Repeat([]byte{byte(i + 1)}, 512), got[i*512:(i+1)*512], "write %d seen by the fenced read", i)
	}
	require.Equal(t, "send", comp(t, a.txCQ).Context)
	require.Equal(t, "write", comp(t, a.txCQ).Context)
	require.Equal(t, "after", string(rb[:comp(t, b.rxCQ).Len]))
	require.NoError(t, a.ep.Read(got[:1], mr.Desc{}, a.peer, 0, regionKey, "check"))
	comp(t, a.txCQ)
	require.Equal(t, byte(0xee), got[0])
}

// TestSelectiveCompletionForms: with FI_SELECTIVE_COMPLETION the msg forms
// complete only with FI_COMPLETION, the vector forms follow the endpoint's
// op flags, and counters count every one.
func TestSelectiveCompletionForms(t *testing.T) {
	a, b := pair(t, sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, cntrs: fi.SEND | fi.WRITE | fi.READ},
		sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, cntrs: fi.RECV})
	rb := make([]byte, 16)
	m := &fabric.Msg{MsgIOV: [][]byte{rb}, Addr: fi.AddrUnspec, Context: "quiet"}
	require.NoError(t, b.ep.RecvMsg(m, 0))
	require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{[]byte("q")}, Addr: a.peer, Context: "q"}, 0))
	require.NoError(t, b.cntr[fi.RECV].Wait(1, waitMs))
	m.Context = "loud"
	require.NoError(t, b.ep.RecvMsg(m, fi.COMPLETION))
	require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{[]byte("l")}, Addr: a.peer, Context: "l"}, fi.COMPLETION))
	require.Equal(t, "l", comp(t, a.txCQ).Context)
	require.Equal(t, "loud", comp(t, b.rxCQ).Context)
	require.NoError(t, a.ep.SendV([][]byte{[]byte("v")}, nil, a.peer, "v"))
	require.NoError(t, a.ep.WriteV([][]byte{[]byte("w")}, nil, a.peer, 0, regionKey, "wv"))
	require.NoError(t, a.ep.ReadV([][]byte{make([]byte, 1)}, nil, a.peer, 0, regionKey, "rv"))
	require.NoError(t, a.ep.ReadMsg(rmaMsg(make([]byte, 1), a.peer, 0, regionKey, "rm", 0), fi.COMPLETION))
	require.Equal(t, "rm", comp(t, a.txCQ).Context)
	noComp(t, a.txCQ)
	require.NoError(t, a.cntr[fi.SEND].Wait(3, waitMs))
	require.NoError(t, a.cntr[fi.WRITE].Wait(1, waitMs))
	require.NoError(t, a.cntr[fi.READ].Wait(2, waitMs))
}
