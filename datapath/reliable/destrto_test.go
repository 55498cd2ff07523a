package reliable

import (
	"net/netip"
	"testing"
	"time"
)

// freeDestKey returns the key of an address of the 10.255/16 range (never
// sent to) whose table slot no address holds, and clears the slot at the
// test's end.
func freeDestKey(t *testing.T) (netip.AddrPort, uint64) {
	t.Helper()
	for port := uint16(1); port != 0; port++ {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 255, 0, 1}), port)
		k := destKey(addr)
		d := destOf(k)
		if d.key.Load() == 0 {
			t.Cleanup(func() { d.key.Store(0); d.rto.Store(0); d.at.Store(0) })
			return addr, k
		}
	}
	t.Fatal("no free slot")
	return netip.AddrPort{}, 0
}

// TestSparsePeerTimeoutFromDestination: samples that many engines take to
// one address (1 ms and 3 ms round trips in turn) give it a timeout that
// covers the spread; a peer of another engine with a single sample of
// its own (1 ms: its own timeout 3 ms) sends with the address's, and a
// peer whose last round was dense keeps its own.
func TestSparsePeerTimeoutFromDestination(t *testing.T) {
	addr, k := freeDestKey(t)
	now := monoNow()
	for i := 0; i < 200; i++ {
		rtt := int64(time.Millisecond)
		if i%2 == 1 {
			rtt = int64(3 * time.Millisecond)
		}
		now += rtt / 4
		destSample(k, rtt, now, false)
	}
	shared := time.Duration(destTimeout(k, now))
	if shared < 3*time.Millisecond {
		t.Fatalf("address timeout %v after 1 and 3 ms round trips, want above 3ms", shared)
	}
	e := &Engine{cfg: Config{RetryInitial: 200 * time.Microsecond, RetryMax: time.Second}}
	p := &txPeer{peer: Peer{addr, 1}, destKey: k}
	p.est.sample(int64(time.Millisecond))
	p.est.advance(2, 2, now) // its round of one sample ends
	p.rto = p.est.timeout(e.cfg.RetryInitial, e.cfg.RetryMax)
	if p.rto >= shared {
		t.Fatalf("the peer's own timeout %v is not below the address's %v: the test shows nothing", p.rto, shared)
	}
	if got := e.sendTimeout(p, now); got != shared {
		t.Fatalf("sparse peer's timeout %v, want the address's %v", got, shared)
	}
	p.est.dense = true
	if got := e.sendTimeout(p, now); got != p.rto {
		t.Fatalf("dense peer's timeout %v, want its own %v", got, p.rto)
	}
	// A new peer (no sample) starts at the address's estimate.
	q := &txPeer{peer: Peer{addr, 2}, destKey: k}
	if got := e.sendTimeout(q, now); got != shared {
		t.Fatalf("new peer's timeout %v, want the address's %v", got, shared)
	}
	// The estimate goes stale without samples.
	if got := destTimeout(k, now+destStale); got != 0 {
		t.Fatalf("address timeout %v after %v without samples, want none", time.Duration(got), time.Duration(destStale))
	}
}

// TestDestSlotSharedByTurns: an address whose slot another address holds
// gets no shared estimate while the holder samples, and takes the slot
// once the holder's estimate is stale.
func TestDestSlotSharedByTurns(t *testing.T) {
	_, k := freeDestKey(t)
	other := k ^ destSlots // another key of the same slot
	now := monoNow()
	destSample(k, int64(time.Millisecond), now, false)
	destSample(other, int64(5*time.Millisecond), now+1, false)
	if got := destTimeout(other, now+1); got != 0 {
		t.Fatalf("the second address got %v from a slot held by the first", time.Duration(got))
	}
	if got := destTimeout(k, now+1); got != int64(3*time.Millisecond) {
		t.Fatalf("the holder's timeout %v, want 3ms (1 ms srtt + 4 x 0.5 ms)", time.Duration(got))
	}
	later := now + destStale
	destSample(other, int64(5*time.Millisecond), later, false)
	if got := destTimeout(other, later); got != int64(15*time.Millisecond) {
		t.Fatalf("after the holder went stale the second address's timeout is %v, want 15ms", time.Duration(got))
	}
	if got := destTimeout(k, later); got != 0 {
		t.Fatalf("the first address still reads %v", time.Duration(got))
	}
}

// TestSpuriousTimeoutRaisesDestinationFloor: a spurious timeout one engine
// saw (a 20 ms answer) lifts the address's timeout for all its peers to
// at least twice that round trip.
func TestSpuriousTimeoutRaisesDestinationFloor(t *testing.T) {
	_, k := freeDestKey(t)
	now := monoNow()
	for i := 0; i < 50; i++ {
		now += int64(250 * time.Microsecond)
		destSample(k, int64(time.Millisecond), now, false)
	}
	destSample(k, int64(20*time.Millisecond), now, true)
	if got := destTimeout(k, now); got < int64(40*time.Millisecond) {
		t.Fatalf("address timeout %v after a spurious timeout of a 20 ms answer, want at least 40ms", time.Duration(got))
	}
}
