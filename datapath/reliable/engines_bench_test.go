package reliable

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// initiatorEngines are n initiator engines, one socket each, with one
// peer (a sink socket), as bench peers' 10,000 endpoints: each fetch-add
// is submitted on the next engine round-robin and answered by feeding
// that engine its response directly, so with many engines each operation
// finds its engine, op, peer and packet slot out of cache. The sockets
// send nothing (muteTransport): what is measured is the engines' own
// work, which a send's system call would bury in its noise.
type initiatorEngines struct {
	es   []*Engine
	sink Peer
	req  Request
	resp []byte
	bld  wire.Builder
	done int
}

func newInitiatorEngines(tb testing.TB, n int) *initiatorEngines {
	sink := drainingSink(tb)
	ie := &initiatorEngines{sink: Peer{sink, 2}, resp: make([]byte, 256)}
	for range n {
		tr, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{Batch: 8, SocketBuffer: 64 << 10})
		if err != nil {
			tb.Fatal(err)
		}
		// Timers far away: a loaded machine must not retransmit meanwhile.
		mt := &muteTransport{Transport: tr}
		mt.mute.Store(true) // the engine's cost, not the kernel's
		e, err := New(mt, Config{EndpointID: 1, ManualProgress: true, MaxOps: 64, CoalesceAt: -1,
			RetryInitial: time.Minute, RetryMax: time.Minute,
			OnComplete: func(c Completion) {
				if c.Err == 0 {
					ie.done++
				}
			}})
		if err != nil {
			tr.Close()
			tb.Fatal(err)
		}
		ie.es = append(ie.es, e)
	}
	tb.Cleanup(func() {
		for _, e := range ie.es {
			e.Close()
		}
	})
	ie.req = Request{Peer: ie.sink, Opcode: wire.OpFetchAtomic, RKey: 1, Count: 1, Payload: le64(1), Result: make([]byte, 8), Context: any(0)}
	return ie
}

// op submits one fetch-add on engine i and feeds it its response.
func (ie *initiatorEngines) op(tb testing.TB, i int) {
	e := ie.es[i]
	if err := e.Submit(&ie.req); err != nil {
		tb.Fatal(err)
	}
	e.rxMu.Lock() // the response decoded into the engine's own packet, as its receive path does
	defer e.rxMu.Unlock()
	e.mu.Lock()
	p := e.peers[ie.sink]
	b := &ie.bld
	b.Reset(ie.resp, wire.Header{Type: wire.TypeResp, SrcEP: ie.sink.EP, DstEP: 1, Session: p.session, Seq: p.nextSeq - 1})
	r, err := b.AddResp(wire.RespDesc{Opcode: wire.OpFetchAtomic, Len: 8})
	if err != nil {
		tb.Fatal(err)
	}
	copy(r, le64(7))
	b.SetLastResult(8, 0)
	if err := wire.Decode(b.Finish(), &e.rxDec); err != nil {
		tb.Fatal(err)
	}
	e.rxNow = e.now() // as progressLocked sets it per batch
	e.handleResponse(&e.rxDec, ie.sink.Addr, &e.rxCompl)
	e.flushLocked()
	e.mu.Unlock()
	e.deliver(&e.rxCompl)
}

// BenchmarkInitiatorEngines: an initiator's cost per fetch-add (submit,
// response matched, completion) against the number of engines the
// fetch-adds go round-robin over (1 and 4,000: a socket each takes file
// descriptors), each with one peer: what grows with the count is the
// engines' state out of cache. allocs/op must stay 0.
func BenchmarkInitiatorEngines(b *testing.B) {
	for _, n := range []int{1, 4000} {
		b.Run(fmt.Sprintf("engines=%d", n), func(b *testing.B) {
			ie := newInitiatorEngines(b, n)
			for i := range 2 * n { // every engine's pools and slots taken
				ie.op(b, i%n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				ie.op(b, i)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}
