package fabric

import (
	"sync/atomic"
	"time"
)

// Spin, then park: how a blocking read (SRead, SReadCond, Cntr.Wait)
// waits, with either progress mode.
//
// Sleeping costs a round trip two scheduler wake-ups (the poll(2) of the
// reader that waits for the answer, and on the other side the one of the
// reader that waits for the request), each several microseconds on bare
// metal and tens in a virtual machine, where a halted vCPU is woken by an
// inter-processor interrupt: on a veth pair that doubled a tagged
// ping-pong's round trip. So a reader that finds nothing polls its
// endpoints for a while first, as MPI implementations do in their
// blocking calls, and sleeps in poll(2) only when that finds nothing.
//
// How long it polls adapts to what it waits for. Each CQ and counter
// keeps a moving average of the polling time that would have caught its
// recent waits (those that had to wait at all): for a wait of d up to
// spinBeforeSleep that is twice d plus spinFloor (at most
// spinBeforeSleep), for a longer one none, since polling would only have
// postponed the sleep it ended in. The average moves a quarter of the way
// to each new wait's, so a reader whose waits are mostly long (a peer
// that answers after a computation, an idle target, a timeout) soon does
// not poll at all and costs no CPU, one wait much longer than the rest
// (the peer descheduled for a while) shortens the polling of the next
// ones by a quarter only, and a reader whose waits become short again
// polls again within a few reads. Below spinMin a reader does not poll.
// The estimate is a floor only while traffic has stopped: a wait that
// begins soon after the set's last packet polls until spinBeforeSleep
// after that packet in any case ("After a packet", below).
//
// While it polls without finding anything, the reader offers its
// processor to other runnable threads as internal/spinyield says: at its
// first empty rounds, and then, once two yields in a row found the
// processor otherwise idle (the peer on another one), only every
// spinyield.Quiet, so a
// ping-pong's replies are not found late by a system call (sched_yield,
// 1.5-2 µs in a VM) in progress when they land; on a shared processor at
// every empty round, so the peer process, or the thread that will
// produce the completion, runs instead of waiting for the poller's time
// slice to end.

// spinFloor is the margin added to twice a wait: what a wait of next to
// nothing asks to poll for.
const spinFloor = 10 * time.Microsecond

// spinMin is the shortest polling time a reader bothers with.
const spinMin = 2 * time.Microsecond

// spinEstimate is the moving average of the polling time that would have
// caught one CQ's or counter's recent blocking waits. Readers update it
// without a lock: concurrent readers may lose an update, which only
// delays the adaptation.
type spinEstimate struct {
	ns atomic.Int64 // the polling time in nanoseconds, plus 1 (0: no wait yet)
}

// budget is how long a reader polls before it sleeps.
func (e *spinEstimate) budget() time.Duration {
	v := e.ns.Load()
	switch {
	case v == 0:
		return spinBeforeSleep // nothing known yet: poll as long as allowed
	case time.Duration(v-1) < spinMin:
		return 0
	}
	return time.Duration(v - 1)
}

// record adds a wait of d to the average.
func (e *spinEstimate) record(d time.Duration) {
	var target int64
	if d <= spinBeforeSleep {
		target = int64(min(spinBeforeSleep, 2*max(d, 0)+spinFloor))
	}
	old := e.ns.Load() - 1
	if old < 0 {
		old = int64(spinBeforeSleep)
	}
	e.ns.Store(old + (target-old)/4 + 1)
}

// After a packet. A reader whose wait begins within spinBeforeSleep of
// the last packet its set received polls at least until spinBeforeSleep
// after that packet, whatever its estimate says, as one wait polls after
// each packet it receives. A ping-pong reads one completion per wait:
// each wait starts a few microseconds after the packet that ended the
// previous one, and lasts a round trip, unless the peer lost its
// processor for a while. Without this, on a loaded machine a few such
// waits (each longer than spinBeforeSleep) took the estimate to nothing;
// the reader then slept in every wait, so the peer's send woke it (in
// the send's system call: 30-70 µs for a kick into a sleeping reader
// against 4-5 µs), the waits grew longer still, and the round trip went
// from 14-17 µs to 60-105 µs (p50, xdpfab bench's tagged ping-pong with
// manual progress at load average 8-10), where a fetch-add's target,
// whose one wait polls after every request, kept 17 µs. An idle reader
// still sleeps spinBeforeSleep after its last packet.

// lastPacket is when a reader of the set last received a packet, in
// nanoseconds since spinEpoch plus 1 (0: never).
type lastPacket struct{ ns atomic.Int64 }

// spinEpoch is the origin of lastPacket's clock (monotonic).
var spinEpoch = time.Now()

// noteRx records that a reader's round received packets now.
func (s *progressSet) noteRx() { s.lastRx.ns.Store(int64(time.Since(spinEpoch)) + 1) }

// pollFrom returns how long a reader whose wait begins at now polls
// without finding anything before it sleeps, and from when: its adaptive
// time from now, or spinBeforeSleep from the set's last packet if that
// ends later.
func (s *progressSet) pollFrom(now time.Time) (time.Duration, time.Time) {
	budget := s.est.budget()
	if v := s.lastRx.ns.Load(); v != 0 {
		rx := spinEpoch.Add(time.Duration(v - 1))
		if rx.Add(spinBeforeSleep).After(now.Add(budget)) {
			return spinBeforeSleep, rx
		}
	}
	return budget, now
}
