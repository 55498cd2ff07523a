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
// The peer is a socket that never answers, and the test drives the timer
// passes itself: timeouts are 10 s, so the timer goroutine stays out of it,
// and after each pass the packets' clock advances to the deadline the pass
// armed, as the timer would.
func TestExpireNoStarvation(t *testing.T) {
	hole, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	cfg := Config{EndpointID: 1, RetryInitial: 10 * time.Second, RetryMax: 10 * time.Second}
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), cfg, nil, nil)
	peer := Peer{hole.LocalAddr().(*net.UDPAddr).AddrPort(), 2}
	const packets = 5 * retxBurst
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: make([]byte, packets*ini.MaxSegment())}); err != nil {
		t.Fatal(err)
	}
	ini.mu.Lock()
	defer ini.mu.Unlock()
	p := ini.txPeerOf(peer)
	if p == nil || p.nextSeq-p.base != packets {
		t.Fatalf("want %d packets in flight", packets)
	}
	var out []Completion
	now := ini.now()
	for seq := p.base; seq != p.nextSeq; seq++ {
		p.slot(seq).deadline = now // a stall: all due at once
	}
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
		// Advance the packets' clock to the timer expire armed.
		now := ini.now()
		for seq := p.base; seq != p.nextSeq; seq++ {
			p.slot(seq).deadline -= next - now
		}
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
