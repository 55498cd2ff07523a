package reliable

import "testing"

func TestReplayInOrder(t *testing.T) {
	w := newReplayWindow(64, 1)
	for s := uint32(1); s < 1000; s++ {
		if v := w.check(s); v != replayNext {
			t.Fatalf("seq %d: %v", s, v)
		}
		if w.advance() {
			t.Fatalf("seq %d: phantom held successor", s)
		}
		if v := w.check(s); v != replayDelivered {
			t.Fatalf("replayed seq %d: %v", s, v)
		}
	}
	if v := w.check(1000 - 65); v != replayTooOld {
		t.Fatalf("old seq: %v", v)
	}
	if v := w.check(1000 + 64); v != replayTooFar {
		t.Fatalf("far seq: %v", v)
	}
}

func TestReplayOutOfOrder(t *testing.T) {
	w := newReplayWindow(64, 1)
	for _, s := range []uint32{3, 5, 2} {
		if v := w.check(s); v != replayAhead {
			t.Fatalf("seq %d: %v", s, v)
		}
		w.hold(s)
	}
	if v := w.check(3); v != replayHeldDup {
		t.Fatalf("held dup: %v", v)
	}
	if s := w.sack(); s != 0b1011 { // 2,3,5 held relative to next=1: bits 0,1,3
		t.Fatalf("sack %b", s)
	}
	var delivered []uint32
	if w.check(1) != replayNext {
		t.Fatal("1 not next")
	}
	for {
		delivered = append(delivered, w.next)
		if !w.advance() {
			break
		}
	}
	if len(delivered) != 3 || w.next != 4 {
		t.Fatalf("delivered %v, next %d", delivered, w.next)
	}
	if w.check(5) != replayHeldDup || w.check(4) != replayNext || w.check(3) != replayDelivered {
		t.Fatal("state after drain")
	}
}

func TestReplayWraparound(t *testing.T) {
	start := ^uint32(0) - 10
	w := newReplayWindow(128, start)
	// Deliver across the wrap in reverse-ish order to exercise holding.
	for s := start + 20; s != start-1; s-- {
		if v := w.check(s); v != replayAhead && v != replayNext {
			t.Fatalf("seq %d: %v", s, v)
		}
		if s == start {
			for w.advance() {
			}
			break
		}
		w.hold(s)
	}
	if w.next != start+21 {
		t.Fatalf("next %d want %d", w.next, start+21)
	}
	if w.check(start+20) != replayDelivered || w.check(5) != replayDelivered || w.check(start+21) != replayNext {
		t.Fatal("wrapped window misclassifies")
	}
	if w.check(start+21+128) != replayTooFar || w.check(start+20-128) != replayTooOld {
		t.Fatal("wrapped bounds")
	}
}

// TestReplayHeldCount checks the window's count of held requests against
// its bitmap through random holds, duplicates and deliveries: the in-order
// path trusts the count and skips the bitmap when it is 0.
func TestReplayHeldCount(t *testing.T) {
	w := newReplayWindow(128, 1)
	rng := uint32(12345)
	for range 20000 {
		rng = rng*1664525 + 1013904223
		seq := w.next + rng>>25 // 0..127 ahead
		switch w.check(seq) {
		case replayNext:
			for w.advance() {
			}
		case replayAhead:
			w.hold(seq)
		case replayHeldDup:
		default:
			t.Fatalf("seq %d, next %d: %v", seq, w.next, w.check(seq))
		}
		n := uint32(0)
		for _, h := range w.held {
			for ; h != 0; h &= h - 1 {
				n++
			}
		}
		if n != w.nheld {
			t.Fatalf("bitmap holds %d, count %d", n, w.nheld)
		}
	}
}
