package fabric

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
// How long it polls adapts to what it waits for: each CQ and counter keeps
// a moving average of how long its blocking reads waited (those that had
// to wait at all), and a reader polls for twice that (plus spinFloor),
// at most spinBeforeSleep. A reader whose waits are longer than
// spinBeforeSleep (a peer that answers after a computation, an idle
// target) does not poll at all, and so costs no CPU: polling would only
// postpone the sleep it ends in. The average moves a quarter of the way
// to each new wait, so it follows a change of pace within a few reads,
// and one wait counts at most spinSampleCap: after an idle phase the
// reader polls again within about ten reads.
//
// While it polls without finding anything, the reader gives up its
// processor to any other runnable thread (sched_yield(2)) between polls:
// on an oversubscribed machine the peer process, or the thread that will
// produce the completion, runs instead of waiting for the poller's time
// slice to end. On an idle processor the call returns at once.

// spinFloor is the least a reader that polls at all polls for.
const spinFloor = 10 * time.Microsecond

// spinSampleCap bounds what one wait adds to the average.
const spinSampleCap = 4 * spinBeforeSleep

// spinEstimate is the moving average of how long one CQ's or counter's
// blocking reads waited. Readers update it without a lock: concurrent
// readers may lose an update, which only delays the adaptation.
type spinEstimate struct {
	ns atomic.Int64 // average wait in nanoseconds, plus 1 (0: no wait yet)
}

// budget is how long a reader polls before it sleeps.
func (e *spinEstimate) budget() time.Duration {
	w := e.ns.Load() - 1
	if w < 0 {
		return spinBeforeSleep // nothing known yet: poll as long as allowed
	}
	if w > int64(spinBeforeSleep) {
		return 0
	}
	return min(spinBeforeSleep, 2*time.Duration(w)+spinFloor)
}

// record adds a wait of d to the average.
func (e *spinEstimate) record(d time.Duration) {
	d = min(max(d, 0), spinSampleCap)
	old := e.ns.Load() - 1
	if old < 0 {
		old = int64(d)
	}
	e.ns.Store(old + (int64(d)-old)/4 + 1)
}

// yieldThread offers the processor to other runnable threads
// (sched_yield(2)). Raw: it never blocks, so the Go scheduler need not
// hand this thread's P to another while it runs.
func yieldThread() {
	_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
