package fabric_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestTaggedAllocs: once warm, a tagged send to a posted receive, a
// tagged send that arrives unexpected and is received later, a tagged
// inject, a vectored tagged send and an untagged send allocate nothing per
// message, initiator and target sides together. The domains use manual
// progress and completions are polled (spin), so what is measured is the
// datapath's own work.
func TestTaggedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	manual := sideOpts{dom: fabric.DomainAttr{Progress: fabric.ProgressManual}}
	a, b := taggedPair(t, manual, manual)
	buf := make([]fabric.CQEntry, 4)
	msg := make([]byte, 8)
	rbuf := make([]byte, 64)
	iov := [][]byte{msg[:3], msg[3:]}
	for _, tc := range []struct {
		name string
		op   func()
	}{
		{"tsend_posted", func() {
			if err := b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 7, 0, opCtx); err != nil {
				t.Fatal(err)
			}
			if err := a.ep.TSend(msg, mr.Desc{}, a.peer, 7, opCtx); err != nil {
				t.Fatal(err)
			}
			spinBoth(t, a.txCQ, b.rxCQ, buf)
		}},
		{"tsend_unexpected", func() {
			if err := a.ep.TSend(msg, mr.Desc{}, a.peer, 8, opCtx); err != nil {
				t.Fatal(err)
			}
			spinBoth(t, a.txCQ, b.rxCQ, buf[:0])
			if err := b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), opCtx); err != nil {
				t.Fatal(err)
			}
			spin(t, b.rxCQ, buf, 1)
		}},
		{"tinject", func() {
			if err := b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 9, 0, opCtx); err != nil {
				t.Fatal(err)
			}
			if err := a.ep.TInject(msg, a.peer, 9); err != nil {
				t.Fatal(err)
			}
			spinBoth(t, b.rxCQ, a.txCQ, buf[:0])
		}},
		{"tsendv", func() {
			if err := b.ep.TRecv(rbuf, mr.Desc{}, fi.AddrUnspec, 10, 0, opCtx); err != nil {
				t.Fatal(err)
			}
			if err := a.ep.TSendV(iov, nil, a.peer, 10, opCtx); err != nil {
				t.Fatal(err)
			}
			spinBoth(t, a.txCQ, b.rxCQ, buf)
		}},
		{"send_recv", func() {
			if err := b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, opCtx); err != nil {
				t.Fatal(err)
			}
			if err := a.ep.Send(msg, mr.Desc{}, a.peer, opCtx); err != nil {
				t.Fatal(err)
			}
			spinBoth(t, a.txCQ, b.rxCQ, buf)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 { // warm the pools, timers and buffers
				tc.op()
			}
			allocs := testing.AllocsPerRun(500, tc.op)
			t.Logf("%s: %.2f allocs/op", tc.name, allocs)
			require.Zero(t, allocs, "%s allocates per message", tc.name)
		})
	}
}

// spinBoth polls two manual-progress CQs until each has given one
// completion (the second none when its buffer is empty): reading one side
// drives only that side's endpoint.
func spinBoth(tb testing.TB, first, second *fabric.CQ, buf []fabric.CQEntry) {
	var one [1]fabric.CQEntry
	want1, want2 := 1, len(buf[:min(len(buf), 1)])
	for want1 > 0 || want2 > 0 {
		n, err := first.Read(one[:want1])
		if err == nil {
			want1 -= n
		} else if !errors.Is(err, fi.EAGAIN) {
			tb.Fatalf("completion error: %v", err)
		}
		n, err = second.Read(one[:max(want2, 0)])
		if err == nil {
			want2 -= n
		} else if !errors.Is(err, fi.EAGAIN) {
			tb.Fatalf("completion error: %v", err)
		}
	}
}

// BenchmarkManualMsg8B: 8-byte sends, 64 in flight, untagged and tagged
// (wildcard receives) side by side, both domains in manual progress and
// one goroutine driving both sides by polling their CQs: what a tagged
// message costs beyond an untagged one, without the blocking reads.
func BenchmarkManualMsg8B(b *testing.B) {
	for _, tagged := range []bool{false, true} {
		b.Run(map[bool]string{false: "untagged", true: "tagged"}[tagged], func(b *testing.B) {
			manual := sideOpts{dom: fabric.DomainAttr{Progress: fabric.ProgressManual}}
			a, r := taggedPair(b, manual, manual)
			const depth, posted = 64, 128
			rbufs := make([][]byte, posted)
			post := func(i int) error {
				if tagged {
					return r.ep.TRecv(rbufs[i], mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), opCtx)
				}
				return r.ep.Recv(rbufs[i], mr.Desc{}, fi.AddrUnspec, opCtx)
			}
			for i := range rbufs {
				rbufs[i] = make([]byte, 8)
				require.NoError(b, post(i))
			}
			msg := make([]byte, 8)
			tx := make([]fabric.CQEntry, depth)
			rx := make([]fabric.CQEntry, depth)
			next, sent, done, received := 0, 0, 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for done < b.N || received < b.N {
				for sent < b.N && sent-done < depth && sent-received < posted {
					var err error
					if tagged {
						err = a.ep.TSend(msg, mr.Desc{}, a.peer, uint64(sent), opCtx)
					} else {
						err = a.ep.Send(msg, mr.Desc{}, a.peer, opCtx)
					}
					if errors.Is(err, fi.EAGAIN) {
						break
					}
					require.NoError(b, err)
					sent++
				}
				if n, err := r.rxCQ.Read(rx); err == nil {
					for range n {
						require.NoError(b, post(next))
						next = (next + 1) % posted
					}
					received += n
				} else if !errors.Is(err, fi.EAGAIN) {
					b.Fatal(err)
				}
				if n, err := a.txCQ.Read(tx); err == nil {
					done += n
				} else if !errors.Is(err, fi.EAGAIN) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
