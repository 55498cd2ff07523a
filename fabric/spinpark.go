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
