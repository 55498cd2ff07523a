package reliable

import (
	"net"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
)

// TestExpireNoStarvation: when more packets are due than one timer pass
// resends (retxBurst), the rest come up again before the ones just resent,
// so every lost packet is resent within a few passes. Pushing the rest by
// their whole RTO let the lowest sequence numbers take every burst once
// timeouts reached RetryMax, and a gap higher up was never resent: the
// target held everything behind it, and the transfer timed out (the
// TestVethSegmented/drop20 flake).
//
// The peer is a socket that never answers, but counts as having answered
// after the packets went out (p.heard), as a target that holds packets
// behind a lost one does (a silent peer gets one probe, see
// TestSilentPeerProbe), and the test drives the timer passes itself:
// timeouts are 10 s, so the timer goroutine stays out of it, and after each
// pass the packets' clock advances to the deadline the pass armed, as the
// timer would.
func TestExpireNoStarvation(t *testing.T) {
	const packets = 5 * retxBurst
	ini, p := stalledWindow(t, Config{EndpointID: 1, RetryInitial: 10 * time.Second, RetryMax: 10 * time.Second}, packets)
	var out []Completion
	p.heard = ini.now() // the peer answered something since they went out
	for range packets/retxBurst + 1 {
		before := ini.stats.retransmits.Load()
		next := ini.expire(&out)
		ini.flushLocked()
		if n := ini.stats.retransmits.Load() - before; n > retxBurst {
			t.Fatalf("one pass resent %d packets, more than retxBurst", n)
		}
		if next == 0 {
			t.Fatal("no timer left armed")
		}
		advanceTo(ini, p, next)
	}
	var starved []uint32
	for seq := p.base; seq != p.nextSeq; seq++ {
		if p.slot(seq).retries == 0 {
			starved = append(starved, seq-p.base)
		}
	}
	if len(starved) > 0 || len(out) > 0 {
		t.Fatalf("after %d passes, packets never resent (offsets): %v; completions %v", packets/retxBurst+1, starved, out)
	}
}

// TestRetxPace: the packets a timer pass leaves due come up again about a
// round trip later, but all of them within about an RTO however long the
// round trip (a loaded or lossy path inflates it to hundreds of ms, and a
// round trip per pass of 8 left the last of a full window unsent past the
// target's retry budget: TestSegmented/loss0.2 ended in FI_ENODATA).
func TestRetxPace(t *testing.T) {
	for _, c := range []struct {
		srtt, rto time.Duration
		left      int
		want      time.Duration
	}{
		{0, 200 * time.Millisecond, 8, time.Millisecond}, // no sample: RetryInitial
		{300 * time.Microsecond, 200 * time.Millisecond, 8, time.Millisecond},
		{5 * time.Millisecond, 200 * time.Millisecond, 8, 5 * time.Millisecond}, // a round trip
		{205 * time.Millisecond, 200 * time.Millisecond, 248, 200 * time.Millisecond * 8 / 248},
		{100 * time.Microsecond, time.Millisecond, 248, minRetxPace}, // floor
	} {
		p := &txPeer{rto: c.rto}
		p.est.srtt = int64(c.srtt)
		got := time.Duration(p.retxPace(c.left, time.Millisecond))
		if got != c.want {
			t.Errorf("srtt %v rto %v, %d left: pace %v, want %v", c.srtt, c.rto, c.left, got, c.want)
		}
		if passes := (c.left + retxBurst - 1) / retxBurst; got > minRetxPace && time.Duration(passes)*got > c.rto+c.rto/8 {
			t.Errorf("srtt %v rto %v, %d left: %d passes of %v take longer than the RTO", c.srtt, c.rto, c.left, passes, got)
		}
	}
}

// TestSilentPeerProbe: while a peer has answered nothing since its packets
// went out, a timeout resends one packet, the probe (the lowest due), and
// pushes the others to its deadline; the passes after resend the probe
// again, backed off, its retries counting towards MaxRetries (after which
// the peer is unreachable), the others never resent: each pass resends one
// packet at most, the same one (silence.go). The peer is
// a socket that never answers; the test drives the passes as
// TestExpireNoStarvation does.
func TestSilentPeerProbe(t *testing.T) {
	cfg := Config{EndpointID: 1, RetryInitial: 10 * time.Second, RetryMax: 10 * time.Second, MaxRetries: 4}
	ini, p := stalledWindow(t, cfg, 3*retxBurst)
	first := p.base
	var out []Completion
	probe := p.slot(first)
	for pass := 1; probe.retries < cfg.MaxRetries; pass++ {
		if pass > 4*cfg.MaxRetries {
			t.Fatalf("after %d passes the probe has %d retries", pass, probe.retries)
		}
		before := ini.stats.retransmits.Load()
		next := ini.expire(&out)
		ini.flushLocked()
		if n := ini.stats.retransmits.Load() - before; n > 1 {
			t.Fatalf("pass %d resent %d packets, want the probe alone", pass, n)
		}
		for seq := first + 1; seq != p.nextSeq; seq++ {
			if s := p.slot(seq); s.retries != 0 {
				t.Fatalf("pass %d: packet %d was resent", pass, seq-first)
			}
		}
		if next == 0 {
			t.Fatalf("pass %d armed no timer", pass)
		}
		advanceTo(ini, p, next)
	}
	if len(out) != 0 {
		t.Fatalf("completions %v before the probe's retries ran out", out)
	}
	if ini.stats.retransmits.Load() != uint64(cfg.MaxRetries) {
		t.Fatalf("%d retransmissions, want %d (the probe's)", ini.stats.retransmits.Load(), cfg.MaxRetries)
	}
}

// stalledWindow submits one RMA write of n packets to a socket that never
// answers and returns the engine, locked until the test ends, and its peer,
// every packet due at once (a stall). Timeouts in cfg must be long (10 s) so
// that the timer goroutine stays out: the tests drive the passes themselves.
func stalledWindow(t *testing.T, cfg Config, n int) (*Engine, *txPeer) {
	t.Helper()
	hole, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), cfg, nil, nil)
	peer := Peer{hole.LocalAddr().(*net.UDPAddr).AddrPort(), 2}
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: make([]byte, n*ini.MaxSegment())}); err != nil {
		t.Fatal(err)
	}
	ini.mu.Lock()
	t.Cleanup(ini.mu.Unlock) // runs before newEngine's Close
	p := ini.txPeerOf(peer)
	if p == nil || p.nextSeq-p.base != uint32(n) {
		t.Fatalf("want %d packets in flight", n)
	}
	now := ini.now()
	for seq := p.base; seq != p.nextSeq; seq++ {
		p.slot(seq).deadline = now
	}
	return ini, p
}

// advanceTo moves the packets' clock to next, the deadline a pass of
// expire armed, as the timer goroutine would have waited for it.
func advanceTo(ini *Engine, p *txPeer, next int64) {
	now := ini.now()
	for seq := p.base; seq != p.nextSeq; seq++ {
		p.slot(seq).deadline -= next - now
	}
}
