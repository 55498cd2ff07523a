package reliable

import (
	"testing"
	"time"
)

const (
	us = int64(time.Microsecond)
	ms = int64(time.Millisecond)
)

// burstRound feeds est a burst of n packets sent together and answered in
// turn, the first after first and the last after last (a queue draining
// at the peer), as the engine does: a sample and an advance per answer.
// seq is the burst's first sequence number; it returns the next.
func burstRound(est *rtoEstimator, seq uint32, n int, first, last, now int64) uint32 {
	for i := range n {
		est.sample(first + (last-first)*int64(i)/int64(max(n-1, 1)))
		est.advance(seq+uint32(i)+1, seq+uint32(n), now)
	}
	return seq + uint32(n)
}

// TestRTOBurstSpread: the spread of one burst's round trips (50 µs for the
// first packet, 1.5 ms for the last) still sets the timeout of the next
// burst, whose tail would otherwise time out: per-sample RFC 6298 would
// have forgotten it by the burst's end (its rttvar shrinks by a quarter
// per sample). Rounds of steady round trips then bring the timeout down
// towards them.
func TestRTOBurstSpread(t *testing.T) {
	var est rtoEstimator
	seq := uint32(1)
	for range 3 {
		seq = burstRound(&est, seq, 190, 50*us, 1500*us, 0)
	}
	rto := est.timeout(0, time.Second)
	if rto <= 1500*time.Microsecond {
		t.Fatalf("timeout %v after bursts whose tails took 1.5 ms: the next tail times out", rto)
	}
	// Steady 100 µs round trips: the timeout decays to near them, a
	// quarter of the excess deviation per round.
	for range 60 {
		seq = burstRound(&est, seq, 4, 100*us, 100*us, 0)
	}
	if rto2 := est.timeout(0, time.Second); rto2 > 300*time.Microsecond || rto2 < 100*time.Microsecond {
		t.Fatalf("timeout %v after 60 rounds of 100 µs round trips, want it near them", rto2)
	}
	if got := est.timeout(time.Millisecond, time.Second); got != time.Millisecond {
		t.Fatalf("timeout %v below the 1 ms minimum", got)
	}
	if got := est.timeout(0, 50*time.Microsecond); got != 50*time.Microsecond {
		t.Fatalf("timeout %v above the 50 µs maximum", got)
	}
}

// TestRTOSpurious: a spurious timeout (the first transmission answered
// after 3 ms, the timeout having been 1 ms) lifts the timeout to twice
// that round trip at once (RFC 4015, and the floor). The floor holds for
// floorDecay whatever the round trips, and another spurious timeout
// starts that over; then an eighth goes per floorDecay, until the
// estimate rules again.
func TestRTOSpurious(t *testing.T) {
	var est rtoEstimator
	seq, now := uint32(1), int64(0)
	for range 10 {
		seq = burstRound(&est, seq, 8, 200*us, 300*us, now)
		now += ms
	}
	if got := est.timeout(time.Millisecond, time.Second); got != time.Millisecond {
		t.Fatalf("timeout %v before, want the 1 ms minimum", got)
	}
	// A burst of 8: its first packet timed out, and its first
	// transmission was answered after 3 ms.
	est.sample(3 * ms)
	est.spurious(3*ms, now)
	est.advance(seq+1, seq+8, now)
	if got := est.timeout(time.Millisecond, time.Second); got < 6*time.Millisecond {
		t.Fatalf("timeout %v after a spurious timeout 3 ms in, want >= 6 ms", got)
	}
	spuriousAt := now
	// Short round trips, one round per millisecond: the floor holds.
	for now < spuriousAt+int64(floorDecay)-ms {
		now += ms
		seq = burstRound(&est, seq, 8, 200*us, 300*us, now)
	}
	if est.floor != 6*ms {
		t.Fatalf("floor %v within floorDecay of the spurious timeout, want 6ms", time.Duration(est.floor))
	}
	if got := est.timeout(time.Millisecond, time.Second); got != 6*time.Millisecond {
		t.Fatalf("timeout %v with the floor at 6 ms", got)
	}
	now += 2 * ms
	seq = burstRound(&est, seq, 8, 200*us, 300*us, now)
	f1 := 6*ms - 6*ms/8
	if est.floor != f1 {
		t.Fatalf("floor %v after floorDecay, want %v", time.Duration(est.floor), time.Duration(f1))
	}
	// Another spurious timeout, shorter: the floor stays and holds anew.
	est.spurious(2*ms, now)
	for range 40 {
		now += ms
		seq = burstRound(&est, seq, 8, 200*us, 300*us, now)
	}
	if est.floor != f1 {
		t.Fatalf("floor %v within floorDecay of the second spurious timeout, want %v", time.Duration(est.floor), time.Duration(f1))
	}
	for range 2000 { // two seconds of clean round trips
		now += ms
		seq = burstRound(&est, seq, 8, 200*us, 300*us, now)
	}
	if got := est.timeout(time.Millisecond, time.Second); got != time.Millisecond {
		t.Fatalf("timeout %v after 2 s without spurious timeouts (floor %v), want the minimum again", got, time.Duration(est.floor))
	}
}

// TestRTORoundEnds: samples within a round do not decay the deviation
// the timeout uses; a round ends only when every packet in flight at its
// start is answered, also across sequence number wrap-around, and then
// the deviation decays by a quarter towards the round's largest.
func TestRTORoundEnds(t *testing.T) {
	var est rtoEstimator
	start := uint32(1<<32 - 10)
	est.advance(start, start+4, 0) // round 1: start..start+3
	est.sample(1 * ms)             // srtt 1 ms, deviation 0.5 ms
	for i := uint32(1); i <= 3; i++ {
		est.sample(1 * ms) // on the average: the per-sample deviation shrinks
		est.advance(start+i, start+4, 0)
		if est.rttvar != ms/2 {
			t.Fatalf("rttvar %v after %d samples on the average, want 0.5 ms kept through the round", time.Duration(est.rttvar), i+1)
		}
	}
	if est.roundEnd != start+4 {
		t.Fatalf("round 1 ends at %d, want %d", est.roundEnd, start+4)
	}
	// Round 1 is answered; round 2, start+4..start+13, across 2^32: the
	// first round's largest deviation was 0.5 ms (no decay at its end),
	// this one's is smaller.
	est.advance(start+4, start+14, 0)
	if est.rttvar != ms/2 || est.roundEnd != start+14 {
		t.Fatalf("after round 1: rttvar %v, next end %d", time.Duration(est.rttvar), est.roundEnd)
	}
	for range 4 {
		est.sample(1 * ms)
	}
	est.advance(start+13, start+14, 0) // one packet of the round still unanswered
	if est.rttvar != ms/2 {
		t.Fatalf("rttvar %v before the round's end", time.Duration(est.rttvar))
	}
	want := ms/2 - (ms/2-est.mdevMax)/4
	est.advance(start+14, start+20, 0)
	if est.rttvar != want || est.roundEnd != start+20 {
		t.Fatalf("after the round: rttvar %v, want %v; next end %d, want %d",
			time.Duration(est.rttvar), time.Duration(want), est.roundEnd, start+20)
	}
}
