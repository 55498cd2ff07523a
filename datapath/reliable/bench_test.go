package reliable

import (
	"errors"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// benchRTO is RetryInitial for the benchmarks; 0 keeps the default (1 ms).
// On a loaded machine 5 ms removes most spurious retransmissions (see the
// retx/pkt metric).
var benchRTO time.Duration

// benchPair starts target and initiator engines on loopback or veth.
func benchPair(b *testing.B, veth, busy bool, maxPacket int) (*Engine, *completions, Peer) {
	o := netOpts{cfg: Config{BusyPoll: busy, MaxPacket: maxPacket, MaxOps: 1024, RetryInitial: benchRTO}}
	if veth {
		o.open = vethNet(b, 0)
	}
	c := newCompletions()
	target := newEngine(b, listenSide(b, o, 0, true), withEP(o.cfg, 2), newTestTarget(1<<20), nil)
	ini := newEngine(b, listenSide(b, o, 0, false), withEP(o.cfg, 1), nil, c)
	peer := Peer{target.LocalAddr(), 2}
	warmUp(b, ini, c, peer)
	return ini, c, peer
}

// warmUp does one exchange before timing starts: on a fresh veth the first
// packet can wait a second for neighbour resolution.
func warmUp(b *testing.B, ini *Engine, c *completions, peer Peer) {
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpMsg}); err != nil {
		b.Fatal(err)
	}
	for {
		if ini.cfg.ManualProgress {
			if _, err := ini.Progress(false); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case cp := <-c.ch:
			if cp.Err != 0 {
				b.Fatal(cp.Err)
			}
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// BenchmarkRoundTrip: one fetch-add in flight, submit to completion.
func BenchmarkRoundTrip(b *testing.B) {
	for _, net := range []string{"loopback", "veth"} {
		for _, mode := range []string{"blocking", "busypoll", "manual"} {
			b.Run(net+"/"+mode, func(b *testing.B) {
				o := netOpts{cfg: Config{BusyPoll: mode == "busypoll", MaxOps: 1024}}
				if net == "veth" {
					o.open = vethNet(b, 0)
				}
				c := newCompletions()
				target := newEngine(b, listenSide(b, o, 0, true), withEP(o.cfg, 2), newTestTarget(64), nil)
				o.cfg.ManualProgress = mode == "manual"
				ini := newEngine(b, listenSide(b, o, 0, false), withEP(o.cfg, 1), nil, c)
				warmUp(b, ini, c, Peer{target.LocalAddr(), 2})
				res := make([]byte, 8)
				r := Request{Peer: Peer{target.LocalAddr(), 2}, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: res, Count: 1}
				b.ReportAllocs()
				for b.Loop() {
					if err := ini.Submit(&r); err != nil {
						b.Fatal(err)
					}
					if mode == "manual" {
						for len(c.ch) == 0 {
							if _, err := ini.Progress(true); err != nil {
								b.Fatal(err)
							}
						}
					}
					if cp := <-c.ch; cp.Err != 0 {
						b.Fatal(cp.Err)
					}
				}
			})
		}
	}
}

// pipeline keeps up to depth copies of r in flight for b.N operations.
// With more > 1, all but every more-th request carry FI_MORE.
func pipeline(b *testing.B, ini *Engine, c *completions, r *Request, depth int, more ...int) {
	b.ReportAllocs()
	b.ResetTimer()
	inflight, done := 0, 0
	for done < b.N {
		for inflight < depth && done+inflight < b.N {
			r.Flags &^= fi.MORE
			if len(more) > 0 && (done+inflight+1)%more[0] != 0 && done+inflight+1 < b.N {
				r.Flags |= fi.MORE
			}
			err := ini.Submit(r)
			if errors.Is(err, fi.EAGAIN) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			inflight++
		}
		cp := <-c.ch
		if cp.Err != 0 {
			b.Fatal(cp.Err)
		}
		inflight--
		done++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	s := ini.Stats()
	b.ReportMetric(float64(s.Retransmits)/float64(s.TxRequests), "retx/pkt")
	if testing.Verbose() {
		ini.mu.Lock()
		for _, p := range ini.peers {
			b.Logf("srtt %v rttvar %v rto %v; stats %+v", time.Duration(p.est.srtt), time.Duration(p.est.rttvar), p.rto, s)
		}
		ini.mu.Unlock()
	}
}

// BenchmarkPipelinedFetchAdd: request rate with 64 fetch-adds in flight.
func BenchmarkPipelinedFetchAdd(b *testing.B) {
	for _, net := range []string{"loopback", "veth"} {
		b.Run(net, func(b *testing.B) {
			ini, c, peer := benchPair(b, net == "veth", false, 0)
			r := Request{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: make([]byte, 8), Count: 1}
			pipeline(b, ini, c, &r, 64)
		})
	}
}

// BenchmarkMsg8B: 8-byte message rate, 256 in flight (they share packets
// when the window is full).
func BenchmarkMsg8B(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		ini, c, peer := benchPair(b, false, false, 0)
		r := Request{Peer: peer, Opcode: wire.OpMsg, Payload: make([]byte, 8)}
		pipeline(b, ini, c, &r, 256)
	})
	b.Run("plain-veth", func(b *testing.B) {
		ini, c, peer := benchPair(b, true, false, 0)
		r := Request{Peer: peer, Opcode: wire.OpMsg, Payload: make([]byte, 8)}
		pipeline(b, ini, c, &r, 256)
	})
	// FI_MORE on 15 of 16 posts: 16 messages share a packet.
	b.Run("more16", func(b *testing.B) {
		ini, c, peer := benchPair(b, false, false, 0)
		r := Request{Peer: peer, Opcode: wire.OpMsg, Payload: make([]byte, 8)}
		pipeline(b, ini, c, &r, 256, 16)
	})
}

// BenchmarkWrite4K: 4 KiB RMA write bandwidth, 64 in flight, with 1500-byte
// MTU packets and with 9000-byte (jumbo) packets.
func BenchmarkWrite4K(b *testing.B) {
	for _, v := range []struct {
		name string
		veth bool
		mp   int
	}{{"loopback-mtu1500", false, 1472}, {"loopback-mtu9000", false, 8972}, {"veth-mtu1500", true, 1472}} {
		b.Run(v.name, func(b *testing.B) {
			ini, c, peer := benchPair(b, v.veth, false, v.mp)
			r := Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: make([]byte, 4096)}
			b.SetBytes(4096)
			pipeline(b, ini, c, &r, 64)
		})
	}
}

// TestSteadyStateAllocs: once warm, a request/response round trip through
// both engines and the UDP transport allocates nothing.
func TestSteadyStateAllocs(t *testing.T) {
	c := newCompletions()
	target := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 2}, newTestTarget(4096), nil)
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 1}, nil, c)
	peer := Peer{target.LocalAddr(), 2}
	res := make([]byte, 8)
	reqs := []Request{
		{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: res, Count: 1},
		{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: make([]byte, 3000)},
		{Peer: peer, Opcode: wire.OpRMARead, RKey: 1, Result: make([]byte, 3000)},
		{Peer: peer, Opcode: wire.OpMsg, Payload: make([]byte, 8), Flags: fi.INJECT},
	}
	run := func() {
		for i := range reqs {
			if err := ini.Submit(&reqs[i]); err != nil {
				t.Fatal(err)
			}
			if cp := <-c.ch; cp.Err != 0 {
				t.Fatal(cp.Err)
			}
		}
	}
	for i := 0; i < 300; i++ { // warm: every window slot's buffer exists
		run()
	}
	// AllocsPerRun truncates the average; count every malloc of 500
	// rounds (2000 requests through both engines) instead, with the GC off.
	// The process-wide count includes a few runtime-internal allocations
	// (sudogs for contended mutexes and blocking selects, the test
	// framework's goroutines), 2 to ~25 per run on a calm machine and 61
	// once at a load average of 9 (more contention, more sudogs); any
	// allocation per request or packet in the datapath would be 2000 or
	// more, per batch hundreds at least.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for i := 0; i < 50; i++ {
		run()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 500; i++ {
		run()
	}
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n >= 200 {
		t.Fatalf("%d allocations in 2000 requests", n)
	}
}
