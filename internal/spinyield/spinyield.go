// Package spinyield is how a thread that polls for something to arrive
// (a completion, a datagram) gives its processor away while it finds
// nothing: the policy of xdpfab's polling readers (fabric's spin-then-park
// waits), and of the kernel UDP ping-pong that `xdpfab bench` measures
// them against, so that both spin alike.
//
// A poller that never yields keeps a processor it may share with the very
// thread that will produce what it waits for (the peer process on the
// same core, the goroutine that completes the operation): that thread
// then waits for the poller's time slice to end, a millisecond or more.
// A poller that yields on every empty round (sched_yield(2)) lets it run
// at once, but on an otherwise idle processor each yield is still a
// system call (1.5-2 µs in a virtual machine), and what arrives during
// one waits for its end: a ping-pong's messages were found 1 µs late on
// average, each way, with the peer on another processor. So a Yielder
// yields at the first empty rounds of a wait (a thread that has just
// sent may have woken its peer on this very processor) and, when
// AloneYields of them in a row came back at once (AloneYield: nothing
// else wanted the processor), polls without system calls for Quiet
// before it offers the processor again. On a shared processor a yield
// runs another thread, takes longer than AloneYield, and the next empty
// round yields again.
package spinyield

import (
	"time"

	"golang.org/x/sys/unix"
)

// AloneYield is the longest a sched_yield(2) takes when no other thread
// runs meanwhile (1.5-2 µs in a VM, well under one on bare metal); a
// switch to another thread and back takes longer.
const AloneYield = 3 * time.Microsecond

// AloneYields is how many yields in a row must come back at once before
// the poller stops yielding for Quiet. One is not proof enough: the
// scheduler may pick the yielding thread again over a runnable one that
// has had more than its share of the processor (EEVDF's eligibility), so
// a yield can return at once while the peer waits for this processor.
const AloneYields = 2

// Quiet is how long a poller that found its processor otherwise idle
// polls before it offers it again: a thread that becomes runnable on it
// meanwhile (woken by something other than the poller's own sends) waits
// at most this long, unless the scheduler preempts the poller for it
// first.
const Quiet = 20 * time.Microsecond

// Yielder is one polling wait's yielding. The zero value yields at the
// first empty round; use a fresh one for each wait, and Reset it when the
// poller has sent something meanwhile (answered what it received): the
// receiver it woke may be waiting for this processor.
type Yielder struct {
	quietUntil time.Time // no yield before this: the last ones found the processor idle
	alone      int       // yields in a row that came back at once
}

// EmptyRound is called by a polling round that found nothing, at now.
func (y *Yielder) EmptyRound(now time.Time) {
	if now.Before(y.quietUntil) {
		return
	}
	Thread()
	if time.Since(now) >= AloneYield {
		y.alone = 0
		return
	}
	if y.alone++; y.alone >= AloneYields {
		y.quietUntil = now.Add(Quiet)
		y.alone = 0
	}
}

// Reset makes the next empty rounds yield.
func (y *Yielder) Reset() { *y = Yielder{} }

// Thread offers the processor to other runnable threads (sched_yield(2)).
// Raw: it never blocks, so the Go scheduler need not hand the calling
// thread's P to another while it runs. On an idle processor it returns at
// once.
func Thread() {
	_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
