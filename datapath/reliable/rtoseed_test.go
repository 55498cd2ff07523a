package reliable

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// withProcessRTO sets the process's RTO estimate for the test and puts
// the one before back at its end.
func withProcessRTO(t *testing.T, d time.Duration) {
	old := processRTO.Load()
	processRTO.Store(int64(d))
	t.Cleanup(func() { processRTO.Store(old) })
}

// silentPeer is a bound UDP port that never answers: requests to it stay
// in flight with their first timeout.
func silentPeer(t *testing.T) Peer {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return Peer{c.LocalAddr().(*net.UDPAddr).AddrPort(), 7}
}

// firstTimeout submits a fetch-add to peer and returns the timeout its
// packet was sent with.
func firstTimeout(t *testing.T, e *Engine, peer Peer) time.Duration {
	t.Helper()
	if err := e.Submit(&Request{Peer: peer, Opcode: wire.OpAtomic, RKey: 1, Payload: le64(1), Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peers[peer]
	if p == nil || p.slot(1) == nil {
		t.Fatalf("no packet in flight to %v", peer)
	}
	return p.slot(1).rto
}

// TestNewPeerTimeoutFromMeasuredRTT: once an endpoint has measured a round
// trip to one peer, a new peer's first packets start at that estimate
// (srtt + 4 rttvar), not at RetryInitial: a target that takes 5 ms to
// answer gives an estimate of at least 15 ms at the first sample, and the
// first packet to a second peer is sent with exactly the engine's
// estimate.
func TestNewPeerTimeoutFromMeasuredRTT(t *testing.T) {
	checkGoroutines(t)
	withProcessRTO(t, 0)
	const delay = 5 * time.Millisecond
	tgt := newTestTarget(4096)
	slow := HandlerFunc(func(in *Incoming, resp []byte) (int, fi.Errno) {
		time.Sleep(delay)
		return tgt.HandleRequest(in, resp)
	})
	cfg := Config{RetryInitial: time.Millisecond, RetryMax: 200 * time.Millisecond}
	ini, c, target := pair(t, netOpts{cfg: cfg}, slow)
	peer := Peer{target.LocalAddr(), 2}
	// The first packets, sent with 1 ms, are retransmitted and give no
	// sample (Karn); the backed-off timeout outlasts the delay, and the
	// next packet answered unretransmitted does.
	var est int64
	for i := 0; i < 20 && est == 0; i++ {
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpAtomic, RKey: 1, Payload: le64(1), Count: 1}); err != nil {
			t.Fatal(err)
		}
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatalf("fetch-add: %+v", cp)
		}
		ini.mu.Lock()
		est = ini.rtoEst
		ini.mu.Unlock()
	}
	if est < int64(3*delay) {
		t.Fatalf("engine's RTO estimate %v after samples of a %v round trip, want at least 3x", time.Duration(est), delay)
	}
	want := min(max(time.Duration(est), cfg.RetryInitial), cfg.RetryMax)
	if got := firstTimeout(t, ini, silentPeer(t)); got != want {
		t.Fatalf("new peer's first timeout %v, want the engine's estimate %v", got, want)
	}
	if got := processRTO.Load(); got != est {
		t.Fatalf("process estimate %v, want the engine's latest %v", time.Duration(got), time.Duration(est))
	}
}

// TestNewEngineTimeoutFromProcessRTT: an engine with no sample of its own
// (one of thousands of endpoints a process opens) starts a peer at the
// process's estimate, clamped to its own RetryInitial..RetryMax; without
// any estimate, at RetryInitial as before.
func TestNewEngineTimeoutFromProcessRTT(t *testing.T) {
	checkGoroutines(t)
	for _, c := range []struct {
		name        string
		process     time.Duration
		initial     time.Duration
		max         time.Duration
		wantTimeout time.Duration
	}{
		{"estimate", 30 * time.Millisecond, time.Millisecond, 200 * time.Millisecond, 30 * time.Millisecond},
		{"capped", 30 * time.Millisecond, time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		{"floor", 100 * time.Microsecond, time.Millisecond, 200 * time.Millisecond, time.Millisecond},
		{"none", 0, 2 * time.Millisecond, 200 * time.Millisecond, 2 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			withProcessRTO(t, c.process)
			e := newEngine(t, listenTransport(t, netOpts{}, 1), Config{EndpointID: 1, RetryInitial: c.initial, RetryMax: c.max}, nil, nil)
			if got := firstTimeout(t, e, silentPeer(t)); got != c.wantTimeout {
				t.Fatalf("first timeout %v, want %v", got, c.wantTimeout)
			}
		})
	}
}

// TestProcessRTOUpdates: the process's estimate follows samples that move
// it by more than an eighth and ignores smaller wobbles (so that engines
// on several threads do not write it on every response).
func TestProcessRTOUpdates(t *testing.T) {
	withProcessRTO(t, 0)
	e := &Engine{cfg: Config{RetryInitial: time.Millisecond, RetryMax: time.Second}}
	p := &txPeer{peer: Peer{netip.MustParseAddrPort("127.0.0.1:9"), 1}}
	p.est.sample(int64(2 * time.Millisecond)) // srtt 2 ms, rttvar 1 ms: estimate 6 ms
	e.noteRTO(p.est.srtt + 4*p.est.rttvar)    // as a sampled response does (matchResponse)
	if got := processRTO.Load(); got != int64(6*time.Millisecond) || e.rtoEst != got {
		t.Fatalf("after the first sample: process %v, engine %v, want 6ms", time.Duration(got), time.Duration(e.rtoEst))
	}
	e.noteRTO(int64(6500 * time.Microsecond)) // within an eighth
	if got := processRTO.Load(); got != int64(6*time.Millisecond) || e.rtoEst != int64(6500*time.Microsecond) {
		t.Fatalf("small move: process %v (want 6ms kept), engine %v (want 6.5ms)", time.Duration(got), time.Duration(e.rtoEst))
	}
	e.noteRTO(int64(3 * time.Millisecond))
	if got := processRTO.Load(); got != int64(3*time.Millisecond) {
		t.Fatalf("large move: process %v, want 3ms", time.Duration(got))
	}
}
