package fabric

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSpinEstimate: the polling time before a blocking read sleeps
// follows the waits it would have caught. Durations are fed in, not
// measured: nothing here depends on timing.
func TestSpinEstimate(t *testing.T) {
	var e spinEstimate
	require.Equal(t, spinBeforeSleep, e.budget(), "nothing known: poll as long as allowed")

	// Round trips of 20 µs: poll about twice that.
	for range 32 {
		e.record(20 * time.Microsecond)
	}
	b := e.budget()
	require.InDelta(t, float64(2*20*time.Microsecond+spinFloor), float64(b), float64(2*time.Microsecond))

	// One wait far longer than the rest shortens the next polls by a
	// quarter only.
	e.record(time.Second)
	require.InDelta(t, float64(b*3/4), float64(e.budget()), float64(time.Microsecond))

	// Waits longer than polling could catch (an idle target, timeouts):
	// soon no polling at all.
	for range 32 {
		e.record(10 * time.Millisecond)
	}
	require.Zero(t, e.budget())

	// Short waits again (measured with the sleep, so longer than a
	// polled round trip): polling comes back within a few reads.
	for range 4 {
		e.record(70 * time.Microsecond)
	}
	require.Greater(t, e.budget(), 50*time.Microsecond)
	require.LessOrEqual(t, e.budget(), spinBeforeSleep)

	// Negative and zero waits count as nothing, never below the floor.
	var z spinEstimate
	for range 32 {
		z.record(-time.Millisecond)
	}
	require.InDelta(t, float64(spinFloor), float64(z.budget()), float64(time.Microsecond))
}

// TestPollFromAfterPacket: a wait that begins within spinBeforeSleep of
// the set's last packet polls until spinBeforeSleep after that packet,
// even with an estimate of nothing (waits that outlasted polling took it
// there); with no packet yet, or one longer ago, the estimate alone
// decides, from the wait's start. Times are fed in, not measured.
func TestPollFromAfterPacket(t *testing.T) {
	var s progressSet
	for range 32 {
		s.est.record(10 * time.Millisecond) // long waits: estimate nothing
	}
	require.Zero(t, s.est.budget())
	now := time.Now()
	budget, from := s.pollFrom(now)
	require.Zero(t, budget, "no packet yet: the estimate")
	require.Equal(t, now, from)

	s.noteRx()
	rx := spinEpoch.Add(time.Duration(s.lastRx.ns.Load() - 1))
	at := rx.Add(5 * time.Microsecond) // the next wait, just after the packet
	budget, from = s.pollFrom(at)
	require.Equal(t, spinBeforeSleep, budget)
	require.Equal(t, rx, from, "polls until spinBeforeSleep after the packet")

	late := rx.Add(2 * spinBeforeSleep)
	budget, from = s.pollFrom(late)
	require.Zero(t, budget, "the packet is long gone: the estimate again")
	require.Equal(t, late, from)

	// An estimate reaching past the packet's polling time wins.
	var e progressSet
	e.noteRx()
	rx = spinEpoch.Add(time.Duration(e.lastRx.ns.Load() - 1))
	at = rx.Add(90 * time.Microsecond)
	budget, from = e.pollFrom(at) // nothing known yet: spinBeforeSleep from now
	require.Equal(t, spinBeforeSleep, budget)
	require.Equal(t, at, from)
}
