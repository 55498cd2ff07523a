package reliable

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

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
	sink := drainingSink(tb)
	tp := &targetPeers{tgt: newTestTarget(64), sink: sink,
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
	tp.e.rxNow = tp.e.now() // as progressLocked sets it per batch
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

// initiatorPeers is an initiator engine with n peers (endpoint ids on one
// sink socket), each fetch-add answered by feeding the engine its
// response directly: the initiator's per-request work and per-peer
// lookups (Submit, the response's peer, the timers) without a target.
type initiatorPeers struct {
	e     *Engine
	sink  netip.AddrPort
	peers []Peer
	req   Request
	resp  []byte
	bld   wire.Builder
	dec   wire.Packet
	done  int
}

func newInitiatorPeers(tb testing.TB, n int) *initiatorPeers {
	sink := drainingSink(tb)
	ip := &initiatorPeers{sink: sink, resp: make([]byte, 256)}
	// Timers far away: a loaded machine must not retransmit meanwhile.
	tr := listenTransport(tb, netOpts{}, 0)
	var err error
	ip.e, err = New(tr, Config{EndpointID: 1, ManualProgress: true, RetryInitial: time.Minute, RetryMax: time.Minute,
		OnComplete: func(c Completion) {
			if c.Err == 0 {
				ip.done++
			}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ip.e.Close() })
	for i := range n {
		ip.peers = append(ip.peers, Peer{ip.sink, uint32(i + 2)})
	}
	ip.req = Request{Opcode: wire.OpFetchAtomic, RKey: 1, Count: 1, Payload: le64(1), Result: make([]byte, 8), Context: any(0)}
	return ip
}

// op submits one fetch-add to peer i and feeds the engine its response.
func (ip *initiatorPeers) op(tb testing.TB, i int) {
	ip.req.Peer = ip.peers[i]
	if err := ip.e.Submit(&ip.req); err != nil {
		tb.Fatal(err)
	}
	e := ip.e
	e.mu.Lock()
	p := e.peers[ip.peers[i]]
	b := &ip.bld
	b.Reset(ip.resp, wire.Header{Type: wire.TypeResp, SrcEP: ip.peers[i].EP, DstEP: 1, Session: p.session, Seq: p.nextSeq - 1})
	r, err := b.AddResp(wire.RespDesc{Opcode: wire.OpFetchAtomic, Len: 8})
	if err != nil {
		tb.Fatal(err)
	}
	copy(r, le64(7))
	b.SetLastResult(8, 0)
	if err := wire.Decode(b.Finish(), &ip.dec); err != nil {
		tb.Fatal(err)
	}
	e.rxNow = e.now() // as progressLocked sets it per batch
	e.handleResponse(&ip.dec, ip.sink, &e.rxCompl)
	e.flushLocked()
	e.mu.Unlock()
	e.deliver(&e.rxCompl)
}

// BenchmarkInitiatorPeers: the initiator's cost per fetch-add (submit,
// response matched, completion) against the number of peers it talks to
// (1 to 10,000), round-robin: ns/op must stay flat and allocs/op 0.
func BenchmarkInitiatorPeers(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("peers=%d", n), func(b *testing.B) {
			ip := newInitiatorPeers(b, n)
			for i := range n { // every peer known
				ip.op(b, i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				ip.op(b, i)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}

// TestInitiatorPeersNoAllocs: with 10,000 peers (1,000 under -short) a
// fetch-add's initiator path allocates nothing once every peer is known,
// and each completes once. Not under -race, whose instrumentation of the
// engine's locks allocates (make test runs it once more without).
func TestInitiatorPeersNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; make test runs the allocation guards without it")
	}
	n := 10000
	if testing.Short() {
		n = 1000
	}
	ip := newInitiatorPeers(t, n)
	for range 2 {
		for i := range n {
			ip.op(t, i)
		}
	}
	i := 0
	if a := testing.AllocsPerRun(3*n, func() {
		ip.op(t, i)
		if i++; i == n {
			i = 0
		}
	}); a != 0 {
		t.Fatalf("%v allocations per fetch-add with %d peers", a, n)
	}
	if want := 5*n + 1; ip.done != want { // 2n, AllocsPerRun's warm-up call, 3n
		t.Fatalf("%d completions, want %d", ip.done, want)
	}
}

// drainingSink is a loopback UDP socket that reads and drops whatever
// reaches it until the test ends, so the engines' sends to it never meet
// a full receive buffer: the benchmarks' stand-in for peers that answer
// by other means.
func drainingSink(tb testing.TB) netip.AddrPort {
	sink, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sink.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
	return sink.LocalAddr().(*net.UDPAddr).AddrPort()
}
