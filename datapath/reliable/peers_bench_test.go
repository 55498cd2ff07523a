package reliable

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// targetPeers is a target engine fed request packets of n peers directly
// (their sessions, sequence numbers and acks kept as initiators keep
// them), its responses sent over a real socket to a sink: the target's
// per-request work and per-peer state without the initiators' cost.
type targetPeers struct {
	e      *Engine
	tgt    *testTarget
	sink   netip.AddrPort
	reqs   [][]byte // per peer, one fetch-add request
	seqs   []uint32
	dec    wire.Packet
	pkt    datapath.Packet
	served int
}

func newTargetPeers(tb testing.TB, n int) *targetPeers {
	sink, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sink.Close() })
	go func() { // drain, so the sink never pushes back
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
	tp := &targetPeers{tgt: newTestTarget(64), sink: sink.LocalAddr().(*net.UDPAddr).AddrPort(),
		reqs: make([][]byte, n), seqs: make([]uint32, n)}
	tp.e = newEngine(tb, listenTransport(tb, netOpts{}, 0), Config{EndpointID: 2, ManualProgress: true}, tp.tgt, nil)
	var b wire.Builder
	for i := range tp.reqs {
		buf := make([]byte, 256)
		b.Reset(buf, wire.Header{Type: wire.TypeReq, SrcEP: uint32(i + 1), DstEP: 2, Session: uint32(i + 1), Seq: 1, Ack: 1})
		if err := b.AddOp(wire.OpDesc{Opcode: wire.OpFetchAtomic, RKey: 1, RespLen: 8, Flags: wire.OpFirst | wire.OpLast}, le64(1), nil); err != nil {
			tb.Fatal(err)
		}
		tp.reqs[i] = b.Finish()
		tp.seqs[i] = 1
	}
	tp.pkt = datapath.Packet{Addr: tp.sink, Meta: datapath.NoMeta}
	return tp
}

// serve hands peer i's next request to the target, acknowledging every
// response before it (one request in flight per peer, as an initiator
// that got its answers sends).
func (tp *targetPeers) serve(tb testing.TB, i int) {
	req := tp.reqs[i]
	seq := tp.seqs[i]
	tp.seqs[i] = seq + 1
	binaryPutSeqAck(req, seq, seq)
	if err := wire.Decode(req, &tp.dec); err != nil {
		tb.Fatal(err)
	}
	tp.pkt.Buf = req
	tp.e.handleRequest(&tp.dec, &tp.pkt)
	if tp.served++; tp.served%32 == 0 {
		tp.e.flushRx()
		tp.tgt.order = tp.tgt.order[:0] // the test handler's log, not the engine's
	}
}

func binaryPutSeqAck(b []byte, seq, ack uint32) {
	le := func(o int, v uint32) { b[o], b[o+1], b[o+2], b[o+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
	le(24, seq)
	le(28, ack)
}

// BenchmarkTargetPeers: the target's cost per request and its heap per
// peer against the number of peers (1 to 10,000), each doing fetch-adds
// one at a time, round-robin. ns/op and allocs/op must stay flat and 0;
// heap-B/peer is the Go heap the target holds per peer after every peer
// has done a few hundred fetch-adds (its state plus its one unacknowledged
// response).
func BenchmarkTargetPeers(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("peers=%d", n), func(b *testing.B) {
			tp := newTargetPeers(b, n)
			tp.e.rxMu.Lock()
			defer tp.e.rxMu.Unlock()
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)       // the engine and the requests exist; no peer state yet
			rounds := min(300, 1_000_000/n) // a few hundred fetch-adds per peer (100 for 10,000)
			for range rounds {
				for i := range n {
					tp.serve(b, i)
				}
			}
			tp.e.flushRx()
			runtime.GC()
			runtime.ReadMemStats(&m1)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				tp.serve(b, i)
				if i++; i == n {
					i = 0
				}
			}
			b.StopTimer()
			tp.e.flushRx()
			b.ReportMetric(float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/float64(n), "heap-B/peer")
			if s := tp.e.store.pool.inUse; s > 64*n {
				b.Fatalf("%d bytes cached for %d peers with one response unacknowledged each", s, n)
			}
		})
	}
}

// TestTargetPeersNoAllocs: with 10,000 peers (1,000 under -short) the
// target's per-request path allocates nothing once every peer is known.
func TestTargetPeersNoAllocs(t *testing.T) {
	n := 10000
	if testing.Short() || raceEnabled {
		n = 1000
	}
	tp := newTargetPeers(t, n)
	tp.e.rxMu.Lock()
	defer tp.e.rxMu.Unlock()
	for range 3 {
		for i := range n {
			tp.serve(t, i)
		}
	}
	i := 0
	if a := testing.AllocsPerRun(5*n, func() {
		tp.serve(t, i)
		if i++; i == n {
			i = 0
		}
	}); a != 0 {
		t.Fatalf("%v allocations per request with %d peers", a, n)
	}
	if c := counterOf(tp.tgt); c != uint64(8*n+1) { // 3n, AllocsPerRun's warm-up call, 5n
		t.Fatalf("counter %d after %d requests", c, 8*n+1)
	}
}
