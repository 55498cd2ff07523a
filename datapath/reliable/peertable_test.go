package reliable

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// TestRxPeerTableMatchesMap: random puts and removes (few addresses and
// endpoint ids, IPv4 and IPv6, so probe runs wrap and overlap) agree
// with a Go map at every step, lookups of absent peers included, and the
// table never exceeds half full.
func TestRxPeerTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tb := newRxPeerTable()
	ref := map[Peer]*rxPeer{}
	peerOf := func() Peer {
		var a netip.Addr
		if rng.IntN(2) == 0 {
			a = netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(4))})
		} else {
			a = netip.AddrFrom16([16]byte{0xfd, 15: byte(rng.IntN(4))})
		}
		return Peer{netip.AddrPortFrom(a, uint16(rng.IntN(64))), uint32(rng.IntN(4))}
	}
	for step := range 200000 {
		p := peerOf()
		want := ref[p]
		if got := tb.get(p); got != want {
			t.Fatalf("step %d: get(%v) = %p, want %p", step, p, got, want)
		}
		switch {
		case want == nil && rng.IntN(3) > 0:
			rp := &rxPeer{peer: p}
			tb.put(rp)
			ref[p] = rp
		case want != nil && rng.IntN(2) == 0:
			tb.remove(want)
			delete(ref, p)
		}
		if tb.len() != len(ref) || 2*tb.len() > len(tb.slots) {
			t.Fatalf("step %d: %d entries in %d slots, want %d", step, tb.len(), len(tb.slots), len(ref))
		}
	}
	n := 0
	tb.each(func(rp *rxPeer) {
		if ref[rp.peer] != rp {
			t.Fatalf("each: %v not in the map", rp.peer)
		}
		n++
	})
	if n != len(ref) {
		t.Fatalf("each visited %d of %d", n, len(ref))
	}
}

// TestRxPeerTableZone: an IPv6 address with a zone and without are
// different peers (they hash alike; equality tells them apart), and so
// are an IPv4 address and its IPv4-mapped IPv6 form.
func TestRxPeerTableZone(t *testing.T) {
	tb := newRxPeerTable()
	a := netip.MustParseAddr("fe80::1")
	ps := []Peer{
		{netip.AddrPortFrom(a, 9), 1},
		{netip.AddrPortFrom(a.WithZone("eth0"), 9), 1},
		{netip.AddrPortFrom(netip.MustParseAddr("10.1.2.3"), 9), 1},
		{netip.AddrPortFrom(netip.MustParseAddr("::ffff:10.1.2.3"), 9), 1},
	}
	for _, p := range ps {
		tb.put(&rxPeer{peer: p})
	}
	for _, p := range ps {
		if rp := tb.get(p); rp == nil || rp.peer != p {
			t.Fatalf("get(%v) = %v", p, rp)
		}
	}
}

// TestEvictIdleLazyOrder: the LRU order lags activity (lruLag), so the
// tail may be a state active since it last moved. Eviction requeues it
// and takes the idle state behind it, never one active within twice the
// retry budget, and gives up (the source is dropped for now) when
// requeueing finds none.
func TestEvictIdleLazyOrder(t *testing.T) {
	e := &Engine{cfg: Config{RetryMax: 100 * time.Millisecond, MaxRetries: 3},
		rxPeers: newRxPeerTable(), store: newRxStore(1<<20, 1472)}
	idle := 2 * e.retryBudget()
	add := func(port uint16, moved, active int64) *rxPeer {
		rp := &rxPeer{peer: Peer{netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), port), 1},
			cache: noEntries, held: noEntries, lruAt: moved, lastActive: active}
		e.rxPeers.put(rp)
		e.rxLRU.pushFront(rp)
		return rp
	}
	now := 10 * idle
	// Oldest first: a state moved long ago but active just now (its
	// requests came within lruLag of its move), then an idle one, then
	// a recent one.
	busy := add(1, 0, now-1)
	old := add(2, 1, 1)
	add(3, now-2, now-2)
	if !e.evictIdlePeer(now) {
		t.Fatal("no state evicted with one idle for 10 retry budgets")
	}
	if e.rxPeers.get(old.peer) != nil || e.rxPeers.get(busy.peer) != busy || e.rxPeers.len() != 2 {
		t.Fatalf("evicted the wrong state: %d left, busy %p", e.rxPeers.len(), e.rxPeers.get(busy.peer))
	}
	if e.rxLRU.head != busy || busy.lruAt != busy.lastActive {
		t.Fatal("the busy state was not requeued at the front")
	}
	if e.evictIdlePeer(now) {
		t.Fatal("evicted a state active within twice the retry budget")
	}
	if e.rxPeers.len() != 2 {
		t.Fatalf("%d states left", e.rxPeers.len())
	}
}
