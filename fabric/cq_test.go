package fabric_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/wait"
)

func openDomain(t testing.TB) *fabric.Domain {
	t.Helper()
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Transport: fabric.TransportUDP}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func TestCQOpenAttrs(t *testing.T) {
	d := openDomain(t)
	cq, err := d.CQOpen(fabric.CQAttr{}, "ctx")
	require.NoError(t, err)
	require.Equal(t, fabric.DefaultCQSize, cq.Attr().Size, "size 0 takes the default")
	require.Equal(t, fabric.CQFormatData, cq.Attr().Format, "FI_CQ_FORMAT_UNSPEC resolves to DATA")
	require.Equal(t, "ctx", cq.Context())
	require.Equal(t, fi.ClassCQ, cq.Class())
	require.NoError(t, cq.Close())
	require.ErrorIs(t, cq.Close(), fi.EINVAL, "second close")

	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	defer set.Close()
	for _, tc := range []struct {
		name string
		attr fabric.CQAttr
		want error
	}{
		{"negative size", fabric.CQAttr{Size: -1}, fi.EINVAL},
		{"huge size", fabric.CQAttr{Size: 1 << 23}, fi.EINVAL},
		{"unknown flag", fabric.CQAttr{Flags: fi.SEND}, fi.EBADFLAGS},
		{"format below range", fabric.CQAttr{Format: -1}, fi.EINVAL},
		{"format above range", fabric.CQAttr{Format: fabric.CQFormatTagged + 1}, fi.EINVAL},
		{"wait set without set", fabric.CQAttr{WaitObj: fi.WaitSet}, fi.EINVAL},
		{"unknown wait object", fabric.CQAttr{WaitObj: fi.WaitObj(99)}, fi.EINVAL},
		{"pollfd", fabric.CQAttr{WaitObj: fi.WaitPollFD}, fi.ENOSYS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.CQOpen(tc.attr, nil)
			require.ErrorIs(t, err, tc.want)
		})
	}
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		cq, err := d.CQOpen(fabric.CQAttr{Size: 1, WaitObj: w, Flags: fi.AFFINITY}, nil)
		require.NoError(t, err, "%v", w)
		require.Equal(t, 1, cq.Attr().Size)
		require.NoError(t, cq.Close())
	}
	cq, err = d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitSet, WaitSet: set}, nil)
	require.NoError(t, err)
	require.NoError(t, cq.Close())
}

// TestCQFormats checks which completion fields each format carries, for a
// receive (flags, len, buf) and a transmit completion.
func TestCQFormats(t *testing.T) {
	for _, format := range []fabric.CQFormat{fabric.CQFormatContext, fabric.CQFormatMsg, fabric.CQFormatData, fabric.CQFormatTagged} {
		t.Run(fmt.Sprint(format), func(t *testing.T) {
			attr := &fabric.CQAttr{Format: format, WaitObj: fi.WaitUnspec}
			a, b := pair(t, sideOpts{txCQ: attr}, sideOpts{rxCQ: attr})
			rbuf := make([]byte, 64)
			require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "r"))
			require.NoError(t, a.ep.SendData([]byte("formats"), mr.Desc{}, 0xda7a, a.peer, "s"))
			tx, rx := comp(t, a.txCQ), comp(t, b.rxCQ)
			require.Equal(t, "s", tx.Context)
			require.Equal(t, "r", rx.Context)
			switch format {
			case fabric.CQFormatContext:
				require.Equal(t, fabric.CQEntry{Context: "s"}, tx)
				require.Equal(t, fabric.CQEntry{Context: "r"}, rx)
			case fabric.CQFormatMsg:
				require.Equal(t, fabric.CQEntry{Context: "s", Flags: fi.SEND | fi.MSG, Len: 7}, tx)
				require.Equal(t, fabric.CQEntry{Context: "r", Flags: fi.RECV | fi.MSG | fi.REMOTE_CQ_DATA, Len: 7}, rx)
			default: // DATA and TAGGED: + buf, data (tag is never set: no FI_TAGGED)
				require.Equal(t, fabric.CQEntry{Context: "s", Flags: fi.SEND | fi.MSG, Len: 7}, tx)
				require.Equal(t, fi.RECV|fi.MSG|fi.REMOTE_CQ_DATA, rx.Flags)
				require.Equal(t, uint64(0xda7a), rx.Data)
				require.Equal(t, 7, rx.Len)
				require.Equal(t, "formats", string(rx.Buf))
				require.Same(t, &rbuf[0], &rx.Buf[0], "buf points into the posted buffer")
			}
		})
	}
}

// TestRemoteCQData: fi_senddata and fi_writemsg with FI_REMOTE_CQ_DATA
// deliver the data in the target's receive completion; a write's
// completion consumes no posted receive and never takes a slot promised to
// one: with the target's CQ full, the write is refused whole (FI_EOVERRUN
// at the initiator, target memory untouched) instead of losing its
// notification.
func TestRemoteCQData(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{rxCQ: &fabric.CQAttr{Size: 2, WaitObj: fi.WaitUnspec}})
	require.NoError(t, a.ep.WriteMsg(rmaMsg([]byte("w"), a.peer, 0, regionKey, "w", 0xfeed), fi.REMOTE_CQ_DATA))
	comp(t, a.txCQ)
	e, src := compFrom(t, b.rxCQ)
	require.Equal(t, fabric.CQEntry{Flags: fi.RMA | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xfeed}, e)
	require.Equal(t, b.peer, src)
	require.NoError(t, a.ep.Write([]byte("w"), mr.Desc{}, a.peer, 0, regionKey, "plain"))
	comp(t, a.txCQ)
	noComp(t, b.rxCQ) // no data, no target completion

	// Two receives hold both slots of b's CQ: the write with data is
	// refused rather than taking one of them or being done unreported.
	rbufs := [][]byte{make([]byte, 8), make([]byte, 8)}
	for i, rb := range rbufs {
		require.NoError(t, b.ep.Recv(rb, mr.Desc{}, fi.AddrUnspec, i))
	}
	require.NoError(t, a.ep.WriteMsg(rmaMsg([]byte("refused"), a.peer, 100, regionKey, "w", 1), fi.REMOTE_CQ_DATA))
	ee := errComp(t, a.txCQ)
	require.ErrorIs(t, ee.Err, fi.EOVERRUN)
	require.Equal(t, "w", ee.Context)
	require.Equal(t, make([]byte, 7), b.mem[100:107], "a refused write leaves memory untouched")
	// The same for a segmented write (its first segment holds the slot)
	// and an atomic with data.
	big := bytes.Repeat([]byte{0xaa}, 3*a.ep.MaxPacket())
	require.NoError(t, a.ep.WriteData(big, mr.Desc{}, 2, a.peer, 4096, regionKey, "big"))
	require.ErrorIs(t, errComp(t, a.txCQ).Err, fi.EOVERRUN)
	require.Equal(t, make([]byte, len(big)), b.mem[4096:4096+len(big)])
	m := oneElem(a, 200, u64(5), fatomic.SUM)
	m.Context, m.Data = "amo", 4
	require.NoError(t, a.ep.AtomicMsg(m, fi.REMOTE_CQ_DATA))
	require.ErrorIs(t, errComp(t, a.txCQ).Err, fi.EOVERRUN)
	require.Equal(t, make([]byte, 8), b.mem[200:208], "a refused atomic is not executed")
	for i := range rbufs {
		require.NoError(t, a.ep.SendData([]byte{byte(i)}, mr.Desc{}, uint64(100+i), a.peer, nil))
		comp(t, a.txCQ)
	}
	for i := range rbufs {
		e := comp(t, b.rxCQ)
		require.Equal(t, i, e.Context)
		require.Equal(t, uint64(100+i), e.Data)
	}
	noComp(t, b.rxCQ)
	// Room again: the segmented write with data lands whole and is
	// reported once.
	require.NoError(t, a.ep.WriteData(big, mr.Desc{}, 3, a.peer, 4096, regionKey, "big"))
	comp(t, a.txCQ)
	e = comp(t, b.rxCQ)
	require.Equal(t, fabric.CQEntry{Flags: fi.RMA | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 3}, e)
	require.Equal(t, big, b.mem[4096:4096+len(big)])
	noComp(t, b.rxCQ)
}

// TestCQErrorEntriesKeepAllFields: fi_cq_err_entry has every field whatever
// the CQ's format.
func TestCQErrorEntriesKeepAllFields(t *testing.T) {
	attr := &fabric.CQAttr{Format: fabric.CQFormatContext, WaitObj: fi.WaitUnspec}
	a, b := pair(t, sideOpts{txCQ: attr}, sideOpts{rxCQ: attr})
	rbuf := make([]byte, 4)
	require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "small"))
	require.NoError(t, a.ep.Send([]byte("0123456789"), mr.Desc{}, a.peer, "s"))
	comp(t, a.txCQ)
	e := errComp(t, b.rxCQ)
	require.Equal(t, fi.ETRUNC, e.Err)
	require.Equal(t, fi.RECV|fi.MSG, e.Flags)
	require.Equal(t, 4, e.Len)
	require.Equal(t, 6, e.OLen)
}

func TestCQReadBatches(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	const n = 10
	for i := range n {
		require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, i))
	}
	for i := range n {
		require.NoError(t, a.ep.Send([]byte{byte(i)}, mr.Desc{}, a.peer, i))
	}
	for _, cq := range []*fabric.CQ{a.txCQ, b.rxCQ} {
		queued(t, cq, n)
		buf := make([]fabric.CQEntry, 4)
		next := 0
		for _, want := range []int{4, 4, 2} {
			k, err := cq.Read(buf)
			require.NoError(t, err)
			require.Equal(t, want, k)
			for _, e := range buf[:k] {
				require.Equal(t, next, e.Context, "completions in posting order")
				next++
			}
		}
		_, err := cq.Read(buf)
		require.ErrorIs(t, err, fi.EAGAIN)
	}
	_, err := a.txCQ.Read(nil)
	require.ErrorIs(t, err, fi.EAGAIN)
}

func TestCQReadFromSources(t *testing.T) {
	b := newSide(t, sideOpts{ep: fabric.EPAttr{AcceptUnknown: true}})
	a1, a2, stranger := newSide(t, sideOpts{}), newSide(t, sideOpts{}), newSide(t, sideOpts{})
	link(t, a1, b)
	link(t, a2, b)
	// stranger knows b, b does not know stranger.
	stranger.peer = stranger.insert(t, b.ep.GetName())
	from1, from2 := b.av.FIAddr(a1.ep.LocalAddr()), b.av.FIAddr(a2.ep.LocalAddr())
	require.NotEqual(t, from1, from2)

	for i := range 3 {
		require.NoError(t, b.ep.Recv(make([]byte, 16), mr.Desc{}, fi.AddrUnspec, i))
	}
	require.NoError(t, a1.ep.Send([]byte("one"), mr.Desc{}, a1.peer, nil))
	comp(t, a1.txCQ)
	require.NoError(t, a2.ep.Send([]byte("two"), mr.Desc{}, a2.peer, nil))
	comp(t, a2.txCQ)
	require.NoError(t, stranger.ep.Send([]byte("three"), mr.Desc{}, stranger.peer, nil))
	comp(t, stranger.txCQ)

	buf := make([]fabric.CQEntry, 3)
	src := make([]fi.Addr, 3)
	_, err := b.rxCQ.ReadFrom(buf, src[:2])
	require.ErrorIs(t, err, fi.EINVAL, "fewer source slots than entries")
	n, err := b.rxCQ.ReadFrom(buf, src)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []fi.Addr{from1, from2, fi.AddrNotAvail}, src)
	require.Equal(t, "three", string(buf[2].Buf))
}

func TestCQReadErrTruncation(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	rbuf := make([]byte, 4)
	require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "short"))
	require.NoError(t, a.ep.Send([]byte("0123456789"), mr.Desc{}, a.peer, "s"))
	require.Equal(t, "s", comp(t, a.txCQ).Context, "the sender completes normally")

	pending(t, b.rxCQ)
	_, err := b.rxCQ.Read(make([]fabric.CQEntry, 1))
	require.ErrorIs(t, err, fi.EAVAIL)
	_, err = b.rxCQ.ReadErr(fi.SEND)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	e, err := b.rxCQ.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, "short", e.Context)
	require.Equal(t, fi.ETRUNC, e.Err)
	require.Equal(t, int(fi.ETRUNC), e.ProvErrno)
	require.Equal(t, 4, e.Len, "bytes placed")
	require.Equal(t, 6, e.OLen, "bytes that did not fit")
	require.Equal(t, "0123", string(rbuf))
	require.Equal(t, b.peer, e.Src)
	_, err = b.rxCQ.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN)
}

// TestCQEAvailWhileHeadIsError: errors and successes stay in one FIFO.
func TestCQEAvailWhileHeadIsError(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	buf := make([]fabric.CQEntry, 4)

	// success, error, success
	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, regionKey, "ok1"))
	pending(t, a.txCQ)
	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, 0xbad, "bad"))
	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, regionKey, "ok2"))
	queued(t, a.txCQ, 3)

	n, err := a.txCQ.Read(buf)
	require.NoError(t, err)
	require.Equal(t, 1, n, "Read stops before the error")
	require.Equal(t, "ok1", buf[0].Context)
	_, err = a.txCQ.Read(buf)
	require.ErrorIs(t, err, fi.EAVAIL)
	_, err = a.txCQ.Read(buf)
	require.ErrorIs(t, err, fi.EAVAIL, "still the head")
	e, err := a.txCQ.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, "bad", e.Context)
	require.Equal(t, fi.ErrnoOf(mr.UnknownKey), e.Err)
	require.Equal(t, fi.RMA|fi.WRITE, e.Flags)
	require.Equal(t, a.peer, e.Src)
	_, err = a.txCQ.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN, "head is a success now")
	n, err = a.txCQ.Read(buf)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "ok2", buf[0].Context)
}

func TestCQSReadTimeout(t *testing.T) {
	d := openDomain(t)
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		t.Run(w.String(), func(t *testing.T) {
			cq, err := d.CQOpen(fabric.CQAttr{WaitObj: w}, nil)
			require.NoError(t, err)
			defer cq.Close()
			start := time.Now()
			_, err = cq.SRead(make([]fabric.CQEntry, 1), 200)
			require.ErrorIs(t, err, fi.EAGAIN)
			require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
			_, err = cq.SRead(make([]fabric.CQEntry, 1), 0)
			require.ErrorIs(t, err, fi.EAGAIN, "zero timeout only checks")
		})
	}
}

func TestCQSReadWakesAcrossGoroutines(t *testing.T) {
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		t.Run(w.String(), func(t *testing.T) {
			attr := &fabric.CQAttr{WaitObj: w}
			a, b := pair(t, sideOpts{}, sideOpts{rxCQ: attr})
			require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "r"))
			type result struct {
				n   int
				e   fabric.CQEntry
				err error
			}
			done := make(chan result, 1)
			go func() {
				buf := make([]fabric.CQEntry, 1)
				n, err := b.rxCQ.SRead(buf, -1) // forever: the send below must wake it
				done <- result{n, buf[0], err}
			}()
			time.Sleep(20 * time.Millisecond) // let it block (not required for correctness)
			require.NoError(t, a.ep.Send([]byte("wake"), mr.Desc{}, a.peer, nil))
			select {
			case r := <-done:
				require.NoError(t, r.err)
				require.Equal(t, 1, r.n)
				require.Equal(t, "r", r.e.Context)
			case <-time.After(waitMs * time.Millisecond):
				t.Fatal("SRead not woken by a completion")
			}
		})
	}
}

func TestCQWaitNone(t *testing.T) {
	d := openDomain(t)
	cq, err := d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitNone}, nil)
	require.NoError(t, err)
	defer cq.Close()
	_, err = cq.SRead(make([]fabric.CQEntry, 1), 10)
	require.ErrorIs(t, err, fi.ENOSYS)
	_, err = cq.SReadFrom(make([]fabric.CQEntry, 1), make([]fi.Addr, 1), 10)
	require.ErrorIs(t, err, fi.ENOSYS)
	require.ErrorIs(t, cq.Signal(), fi.ENOSYS)
	require.ErrorIs(t, cq.TryWait(), fi.ENOSYS)
	var fd int
	require.ErrorIs(t, cq.Control(wait.GetWait, &fd), fi.ENODATA)
	_, err = cq.Read(make([]fabric.CQEntry, 1))
	require.ErrorIs(t, err, fi.EAGAIN)
}

func pollFD(t *testing.T, fd int, timeoutMs int) int {
	t.Helper()
	ok, err := wait.PollFD(fd, time.Duration(timeoutMs)*time.Millisecond)
	require.NoError(t, err)
	if ok {
		return 1
	}
	return 0
}

func TestCQWaitFD(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{rxCQ: &fabric.CQAttr{WaitObj: fi.WaitFD}})
	var kind fi.WaitObj
	require.NoError(t, b.rxCQ.Control(wait.GetWaitObj, &kind))
	require.Equal(t, fi.WaitFD, kind)
	fd := -1
	require.NoError(t, b.rxCQ.Control(wait.GetWait, &fd))
	require.GreaterOrEqual(t, fd, 0)
	require.ErrorIs(t, b.rxCQ.Control(wait.GetWait, new(wait.MutexCond)), fi.EINVAL)

	for round := range 3 {
		// Empty CQ: TryWait says it is safe to block, and the fd is not
		// readable. wait.Object.Signal makes the eventfd readable before
		// it records that it did, so a Reset racing the previous
		// completion's Signal can leave one stale (spurious) wake-up:
		// allow TryWait to be repeated a few times, as a poll loop would.
		var readable int
		for range 50 {
			require.NoError(t, b.rxCQ.TryWait(), "round %d: empty CQ: safe to block", round)
			if readable = pollFD(t, fd, 0); readable == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, 0, readable, "round %d: empty CQ: fd not readable", round)
		require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, round))
		require.NoError(t, a.ep.Send([]byte("fd"), mr.Desc{}, a.peer, nil))
		require.Equal(t, 1, pollFD(t, fd, waitMs), "a completion makes the fd readable")
		require.ErrorIs(t, b.rxCQ.TryWait(), fi.EAGAIN, "completion queued")
		require.Equal(t, round, comp(t, b.rxCQ).Context)
	}
}

func TestCQSignal(t *testing.T) {
	d := openDomain(t)
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		t.Run(w.String(), func(t *testing.T) {
			cq, err := d.CQOpen(fabric.CQAttr{WaitObj: w}, nil)
			require.NoError(t, err)
			defer cq.Close()
			done := make(chan error, 1)
			go func() {
				_, err := cq.SRead(make([]fabric.CQEntry, 1), -1)
				done <- err
			}()
			// Signal wakes whoever is blocked at that moment: repeat until
			// the reader was blocked when one arrived.
			deadline := time.After(waitMs * time.Millisecond)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				require.NoError(t, cq.Signal())
				select {
				case err := <-done:
					require.ErrorIs(t, err, fi.EAGAIN)
					return
				case <-deadline:
					t.Fatal("fi_cq_signal did not wake SRead")
				case <-tick.C:
				}
			}
		})
	}
}

func TestCQWaitSet(t *testing.T) {
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	attr := &fabric.CQAttr{WaitObj: fi.WaitSet, WaitSet: set}
	a, b := pair(t, sideOpts{}, sideOpts{rxCQ: attr, txCQ: attr})
	require.ErrorIs(t, set.Close(), fi.EBUSY, "CQs are members")

	var fd int
	require.NoError(t, b.rxCQ.Control(wait.GetWait, &fd), "the set's fd")
	require.NoError(t, wait.TryWait(set))
	require.ErrorIs(t, set.Wait(0), fi.ETIMEDOUT)
	require.Equal(t, 0, pollFD(t, fd, 0))

	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "r"))
	require.NoError(t, a.ep.Send([]byte("set"), mr.Desc{}, a.peer, nil))
	require.NoError(t, set.Wait(waitMs))
	require.Equal(t, 1, pollFD(t, fd, waitMs))
	require.ErrorIs(t, b.rxCQ.TryWait(), fi.EAGAIN)
	// fi_cq_sread works on a CQ in a wait set.
	require.Equal(t, "r", comp(t, b.rxCQ).Context)
	require.NoError(t, b.rxCQ.TryWait())

	// The transmit CQ is in the same set: its completion wakes the set too.
	require.NoError(t, b.ep.Send([]byte("back"), mr.Desc{}, b.peer, "s"))
	require.NoError(t, set.Wait(waitMs))
	require.Equal(t, "s", comp(t, b.txCQ).Context)

	b.close(t)
	a.close(t)
	require.NoError(t, set.Close(), "closing the CQs left the set")
}

func TestCQCloseBusyWhileBound(t *testing.T) {
	s := newSide(t, sideOpts{})
	require.ErrorIs(t, s.txCQ.Close(), fi.EBUSY)
	require.ErrorIs(t, s.rxCQ.Close(), fi.EBUSY)
	// One CQ bound for both directions holds two references.
	d := s.dom
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	avx, err := av.Open(av.Attr{}, nil, av.WithMirror(nil))
	require.NoError(t, err)
	cq, err := d.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	require.NoError(t, ep.Bind(avx, 0))
	require.NoError(t, ep.Bind(cq, fi.TRANSMIT|fi.RECV))
	require.ErrorIs(t, cq.Close(), fi.EBUSY)
	require.ErrorIs(t, avx.Close(), fi.EBUSY)
	require.NoError(t, ep.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, avx.Close())
}
