package fabric_test

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// opCtx is a context value boxed once: a pointer in an interface costs no
// allocation, so the measurements below see only xdpfab's own.
var opCtx any = new(int)

// spin reads k completions from cq, polling; it fails the test on an error
// completion.
func spin(tb testing.TB, cq *fabric.CQ, buf []fabric.CQEntry, k int) {
	for k > 0 {
		n, err := cq.Read(buf[:min(k, len(buf))])
		switch {
		case err == nil:
			k -= n
		case errors.Is(err, fi.EAGAIN):
			// Yield: on a small machine the datapath goroutines need
			// this P to hand the completion over.
			runtime.Gosched()
		default:
			e, _ := cq.ReadErr(0)
			tb.Fatalf("completion error %v: %v", err, e.Err)
		}
	}
}

// block reads k completions from cq, sleeping in SRead.
func block(tb testing.TB, cq *fabric.CQ, buf []fabric.CQEntry, k int) {
	for k > 0 {
		n, err := cq.SRead(buf[:min(k, len(buf))], waitMs)
		if err != nil {
			tb.Fatalf("sread: %v", err)
		}
		k -= n
	}
}

// TestDatapathAllocs: once warm, a FetchAtomic, a Send/Recv pair, a Write
// and a vectored atomic allocate nothing per operation, initiator and
// target sides together (AllocsPerRun counts every goroutine).
func TestDatapathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := pair(t, sideOpts{}, sideOpts{})
	buf := make([]fabric.CQEntry, 4)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	msg := make([]byte, 8)
	rbuf := make([]byte, 8)
	wbuf := make([]byte, 4096)
	iov := []fabric.IOC{{Buf: make([]byte, 8), Count: 1}, {Buf: make([]byte, 16), Count: 2}}
	resv := []fabric.IOC{{Buf: make([]byte, 16), Count: 2}, {Buf: make([]byte, 8), Count: 1}}
	for _, tc := range []struct {
		name string
		op   func()
	}{
		{"fetch_atomic", func() {
			if err := a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
				fatomic.UINT64, fatomic.SUM, opCtx); err != nil {
				t.Fatal(err)
			}
			block(t, a.txCQ, buf, 1)
		}},
		{"send_recv", func() {
			if err := b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, opCtx); err != nil {
				t.Fatal(err)
			}
			if err := a.ep.Send(msg, mr.Desc{}, a.peer, opCtx); err != nil {
				t.Fatal(err)
			}
			block(t, a.txCQ, buf, 1)
			block(t, b.rxCQ, buf, 1)
		}},
		{"write_4k", func() {
			if err := a.ep.Write(wbuf, mr.Desc{}, a.peer, 0, regionKey, opCtx); err != nil {
				t.Fatal(err)
			}
			block(t, a.txCQ, buf, 1)
		}},
		{"fetch_atomicv", func() {
			if err := a.ep.FetchAtomicV(iov, nil, resv, nil, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, opCtx); err != nil {
				t.Fatal(err)
			}
			block(t, a.txCQ, buf, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 { // warm the pools, timers and buffers
				tc.op()
			}
			allocs := testing.AllocsPerRun(500, tc.op)
			t.Logf("%s: %.2f allocs/op", tc.name, allocs)
			require.Zero(t, allocs, "%s allocates per operation", tc.name)
		})
	}
}

// reportRetransmits adds the initiator's retransmissions per operation,
// which tell a slow run on a busy machine from a datapath problem.
func reportRetransmits(b *testing.B, s *side) {
	b.Cleanup(func() {
		st := s.ep.Stats()
		b.ReportMetric(float64(st.Retransmits)/float64(b.N), "retx/op")
	})
}

func benchPair(b *testing.B) (*side, *side) {
	b.Helper()
	return pair(b, sideOpts{txCQ: &fabric.CQAttr{WaitObj: fi.WaitUnspec, Size: 1024}},
		sideOpts{rxCQ: &fabric.CQAttr{WaitObj: fi.WaitUnspec, Size: 1024}})
}

// BenchmarkFetchAtomicRoundTrip: uint64 fetch-add, one in flight, the
// caller sleeping in SRead until the completion: the latency of one remote
// atomic. (Polling the CQ from a goroutine instead is slower with the
// kernel UDP transport: the receive goroutines wait in Go's netpoller,
// which a busy P only polls from sysmon, up to 10 ms apart.)
func BenchmarkFetchAtomicRoundTrip(b *testing.B) {
	a, _ := benchPair(b)
	reportRetransmits(b, a)
	buf := make([]fabric.CQEntry, 1)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
			fatomic.UINT64, fatomic.SUM, opCtx); err != nil {
			b.Fatal(err)
		}
		block(b, a.txCQ, buf, 1)
	}
}

// pipeline keeps depth operations in flight until b.N have completed.
func pipeline(b *testing.B, cq *fabric.CQ, depth int, post func() error) {
	b.Helper()
	buf := make([]fabric.CQEntry, depth)
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			err := post()
			if errors.Is(err, fi.EAGAIN) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			posted++
		}
		// Take what has completed; sleep for more only when the window is
		// full (see BenchmarkFetchAtomicRoundTrip on polling).
		timeout := 0
		if posted-done >= depth || posted == b.N {
			timeout = waitMs
		}
		n, err := cq.SRead(buf, timeout)
		switch {
		case err == nil:
			done += n
		case errors.Is(err, fi.EAGAIN) && timeout == 0:
		default:
			e, _ := cq.ReadErr(0)
			b.Fatalf("completion error %v: %v", err, e.Err)
		}
	}
}

// BenchmarkFetchAtomicPipelined: uint64 fetch-add with 64 in flight: the
// atomic rate of one endpoint pair.
func BenchmarkFetchAtomicPipelined(b *testing.B) {
	a, _ := benchPair(b)
	reportRetransmits(b, a)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	pipeline(b, a.txCQ, 64, func() error {
		return a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
			fatomic.UINT64, fatomic.SUM, opCtx)
	})
}

// BenchmarkSendRecv8B: 8-byte messages, 64 in flight, receives reposted as
// they complete: the message rate.
func BenchmarkSendRecv8B(b *testing.B) {
	a, r := benchPair(b)
	reportRetransmits(b, a)
	const depth = 64
	rbufs := make([][]byte, depth*2)
	for i := range rbufs {
		rbufs[i] = make([]byte, 8)
		require.NoError(b, r.ep.Recv(rbufs[i], mr.Desc{}, fi.AddrUnspec, opCtx))
	}
	msg := make([]byte, 8)
	rx := make([]fabric.CQEntry, depth)
	next := 0
	b.ReportAllocs()
	b.SetBytes(8)
	b.ResetTimer()
	received := 0
	pipeline(b, a.txCQ, depth, func() error {
		// Repost the receives that completed, so sends never wait as
		// unexpected messages.
		for {
			n, err := r.rxCQ.Read(rx)
			if err != nil {
				break
			}
			for range n {
				if err := r.ep.Recv(rbufs[next], mr.Desc{}, fi.AddrUnspec, opCtx); err != nil {
					return err
				}
				next = (next + 1) % len(rbufs)
			}
			received += n
		}
		return a.ep.Send(msg, mr.Desc{}, a.peer, opCtx)
	})
	b.StopTimer()
	for received < b.N {
		n, err := r.rxCQ.SRead(rx, waitMs)
		require.NoError(b, err)
		received += n
	}
}

// BenchmarkWrite4KiB: 4 KiB RMA writes (three packets each), 64 in flight:
// bandwidth.
func BenchmarkWrite4KiB(b *testing.B) {
	a, _ := benchPair(b)
	reportRetransmits(b, a)
	data := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	pipeline(b, a.txCQ, 64, func() error {
		return a.ep.Write(data, mr.Desc{}, a.peer, 0, regionKey, opCtx)
	})
}

// TestMsgRMAAllocs: once warm, the vector and msg forms of fi_msg(3) and
// fi_rma(3) allocate nothing per operation, initiator and target sides
// together. Both sides use manual progress and completions are polled,
// each poll driving both endpoints: this measures the calls and the
// datapath, not the blocking reads.
func TestMsgRMAAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	manual := fabric.DomainAttr{Progress: fabric.ProgressManual}
	a, b := pair(t, sideOpts{dom: manual}, sideOpts{dom: manual})
	buf := make([]fabric.CQEntry, 4)
	p1, p2, p3 := make([]byte, 8), make([]byte, 100), make([]byte, 3000)
	r1, r2, r3 := make([]byte, 8), make([]byte, 100), make([]byte, 3000)
	iov := [][]byte{p1, p2, p3}
	riov := [][]byte{r1, r2, r3}
	smsg := &fabric.Msg{MsgIOV: iov, Addr: a.peer, Context: opCtx, Data: 9}
	rmsg := &fabric.Msg{MsgIOV: riov, Addr: fi.AddrUnspec, Context: opCtx}
	n := len(p1) + len(p2) + len(p3)
	wmsg := &fabric.MsgRMA{MsgIOV: iov, Addr: a.peer, RMAIOV: []fabric.RMAIov{{Addr: 64, Len: n, Key: regionKey}},
		Context: opCtx, Data: 7}
	rdmsg := &fabric.MsgRMA{MsgIOV: riov, Addr: a.peer, RMAIOV: []fabric.RMAIov{{Addr: 64, Len: n, Key: regionKey}},
		Context: opCtx}
	// poll reads one completion from cq, driving the other side's
	// progress between reads (fi_cq_read with count 0).
	poll := func(cq *fabric.CQ) {
		for {
			n, err := cq.Read(buf[:1])
			switch {
			case n == 1:
				return
			case !errors.Is(err, fi.EAGAIN):
				e, _ := cq.ReadErr(0)
				t.Fatalf("completion error %v: %v", err, e.Err)
			}
			_, _ = a.txCQ.Read(buf[:0])
			_, _ = b.rxCQ.Read(buf[:0])
		}
	}
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		op   func()
	}{
		{"sendv_recvv", func() {
			check(b.ep.RecvV(riov, nil, fi.AddrUnspec, opCtx))
			check(a.ep.SendV(iov, nil, a.peer, opCtx))
			poll(a.txCQ)
			poll(b.rxCQ)
		}},
		{"sendmsg_recvmsg_data", func() {
			check(b.ep.RecvMsg(rmsg, 0))
			check(a.ep.SendMsg(smsg, fi.REMOTE_CQ_DATA))
			poll(a.txCQ)
			poll(b.rxCQ)
		}},
		{"injectdata", func() {
			check(b.ep.Recv(r1, mr.Desc{}, fi.AddrUnspec, opCtx))
			check(a.ep.InjectData(p1, 5, a.peer))
			poll(b.rxCQ)
		}},
		{"writev", func() {
			check(a.ep.WriteV(iov, nil, a.peer, 64, regionKey, opCtx))
			poll(a.txCQ)
		}},
		{"writemsg_cq_data", func() {
			check(a.ep.WriteMsg(wmsg, fi.REMOTE_CQ_DATA))
			poll(a.txCQ)
			poll(b.rxCQ)
		}},
		{"writedata", func() {
			check(a.ep.WriteData(p3, mr.Desc{}, 3, a.peer, 64, regionKey, opCtx))
			poll(a.txCQ)
			poll(b.rxCQ)
		}},
		{"inject_writedata", func() {
			check(a.ep.InjectWriteData(p2, 4, a.peer, 64, regionKey))
			poll(b.rxCQ)
		}},
		{"readv", func() {
			check(a.ep.ReadV(riov, nil, a.peer, 64, regionKey, opCtx))
			poll(a.txCQ)
		}},
		{"readmsg", func() {
			check(a.ep.ReadMsg(rdmsg, fi.COMPLETION))
			poll(a.txCQ)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 { // warm the pools, timers and buffers
				tc.op()
			}
			allocs := testing.AllocsPerRun(500, tc.op)
			t.Logf("%s: %.2f allocs/op", tc.name, allocs)
			require.Zero(t, allocs, "%s allocates per operation", tc.name)
		})
	}
}
