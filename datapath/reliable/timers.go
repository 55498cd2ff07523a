package reliable

import (
	"sync"
	"time"
)

// Timers. One goroutine per process (timerSched) runs the retransmission,
// FI_MORE and coalescing deadlines of every engine, instead of one timer
// goroutine per engine: a process with ten thousand endpoints (an MPI rank
// talking to every other, `xdpfab bench peers`) would otherwise have ten
// thousand goroutines ticking, and their wake-ups, not the packets, would
// set its rate. An engine is in the scheduler's heap only while it has a
// deadline (something in flight, requests held by FI_MORE); one with
// nothing to watch costs no wake-up at all. The heap holds one entry per
// engine, its earliest deadline (Engine.timerNext): packets in flight
// only ever add later deadlines, so arming is a comparison under the
// engine's own lock, and the scheduler's lock is taken only when an
// engine's earliest deadline moves earlier (typically its first packet
// after being idle).
//
// The scheduler goroutine runs while at least one engine is open and
// exits with the last Close, so a process without engines has none.

// clockEpoch is the origin of every engine's clock (Engine.now): the
// scheduler compares deadlines of all engines.
var clockEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(clockEpoch)) }

// timerSched is the process's timer goroutine and its heap of engines by
// earliest deadline.
type timerSched struct {
	mu sync.Mutex // guards everything below and Engine.tmWhen, tmIndex
	// heap of armed engines by tmWhen; Engine.tmIndex is the position.
	heap    []*Engine
	engines int  // open engines: the goroutine runs while > 0
	running bool // the goroutine exists
	// sleepUntil is the deadline the goroutine sleeps for (0: none, it
	// waits for a wake-up); arming an earlier one wakes it.
	sleepUntil int64
	sleeping   bool
	wake       chan struct{} // capacity 1
	due        []*Engine     // the goroutine's batch, reused
}

var timers = &timerSched{wake: make(chan struct{}, 1)}

// register counts a new engine, starting the goroutine if needed.
func (ts *timerSched) register() {
	ts.mu.Lock()
	ts.engines++
	openEngines.Add(1)
	if !ts.running {
		ts.running = true
		go ts.loop()
	}
	ts.mu.Unlock()
}

// unregister removes e (closed: it arms nothing any more) and lets the
// goroutine exit when it was the last engine.
func (ts *timerSched) unregister(e *Engine) {
	ts.mu.Lock()
	if e.tmIndex >= 0 {
		ts.remove(e.tmIndex)
	}
	ts.engines--
	openEngines.Add(-1)
	ts.mu.Unlock()
	ts.signal()
}

// arm makes sure e's timers run by when. e.mu is held (the caller's lock
// order is e.mu, then ts.mu).
func (ts *timerSched) arm(e *Engine, when int64) {
	ts.mu.Lock()
	switch {
	case e.tmIndex < 0:
		e.tmWhen = when
		e.tmIndex = len(ts.heap)
		ts.heap = append(ts.heap, e)
		ts.up(e.tmIndex)
	case when < e.tmWhen:
		e.tmWhen = when
		ts.up(e.tmIndex)
	default:
		ts.mu.Unlock()
		return
	}
	wake := ts.heap[0] == e && ts.sleeping && (ts.sleepUntil == 0 || when < ts.sleepUntil)
	if wake {
		ts.sleeping = false // one wake-up is enough
	}
	ts.mu.Unlock()
	if wake {
		ts.signal()
	}
}

// disarm takes e out of the heap: it has no deadline left. The goroutine
// is not woken: at worst it wakes for e's old deadline and finds nothing.
// e.mu is held.
func (ts *timerSched) disarm(e *Engine) {
	ts.mu.Lock()
	if e.tmIndex >= 0 {
		ts.remove(e.tmIndex)
	}
	ts.mu.Unlock()
}

func (ts *timerSched) signal() {
	select {
	case ts.wake <- struct{}{}:
	default:
	}
}

// loop is the timer goroutine.
func (ts *timerSched) loop() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		ts.mu.Lock()
		if ts.engines == 0 {
			ts.running = false
			ts.mu.Unlock()
			t.Stop()
			return
		}
		now := monoNow()
		due := ts.due[:0]
		for len(ts.heap) > 0 && ts.heap[0].tmWhen <= now {
			e := ts.heap[0]
			ts.remove(0)
			due = append(due, e)
		}
		var next int64
		if len(ts.heap) > 0 {
			next = ts.heap[0].tmWhen
		}
		ts.sleepUntil = next
		ts.sleeping = len(due) == 0
		ts.mu.Unlock()
		if len(due) > 0 {
			for i, e := range due {
				e.runTimers()
				due[i] = nil
			}
			ts.due = due[:0]
			continue
		}
		ts.due = due
		if next == 0 {
			<-ts.wake
			continue
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(time.Duration(next - now))
		select {
		case <-t.C:
		case <-ts.wake:
		}
	}
}

// runTimers handles e's due deadlines and arms its next one. Close waits
// for it (tmRun), so no completion is delivered after Close returns.
func (e *Engine) runTimers() {
	e.tmRun.Lock()
	defer e.tmRun.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.timerArm = false // the heap entry was taken; expire re-arms what remains
	next := e.expire(&e.tmCompl)
	e.flushLocked()
	if next == 0 && e.rxDeferred.Load() {
		// Deferred responses the receive side held (rxMu) just now:
		// try again (deferRx).
		next = e.now() + int64(e.cfg.RetryInitial)
	}
	if next != 0 {
		e.armTimer(next)
	}
	e.mu.Unlock()
	e.deliver(&e.tmCompl)
}

// Heap operations; ts.mu is held.

func (ts *timerSched) less(i, j int) bool { return ts.heap[i].tmWhen < ts.heap[j].tmWhen }

func (ts *timerSched) swap(i, j int) {
	h := ts.heap
	h[i], h[j] = h[j], h[i]
	h[i].tmIndex = i
	h[j].tmIndex = j
}

func (ts *timerSched) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !ts.less(j, i) {
			break
		}
		ts.swap(i, j)
		j = i
	}
}

func (ts *timerSched) down(i int) {
	n := len(ts.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && ts.less(r, l) {
			j = r
		}
		if !ts.less(j, i) {
			return
		}
		ts.swap(i, j)
		i = j
	}
}

// remove takes the entry at i out of the heap.
func (ts *timerSched) remove(i int) {
	last := len(ts.heap) - 1
	e := ts.heap[i]
	if i != last {
		ts.swap(i, last)
	}
	ts.heap[last] = nil
	ts.heap = ts.heap[:last]
	if i != last {
		ts.down(i)
		ts.up(i)
	}
	e.tmIndex = -1
}
