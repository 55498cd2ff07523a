package reliable

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// An engine with Config.SharedPoll has no receive goroutine: the process's
// shared poller (datapath/rxpoll) runs one receive batch of the engine
// whenever its transport's descriptor is ready. With thousands of engines
// in a process (issue 17: 10,000 initiator endpoints against one target)
// that saves per operation a goroutine wake-up, the empty receive before
// parking and the error-queue check before it (at 1,000 peers 4 system
// calls per operation became 2 with the shared poller: the send and the
// receive), and one wake-up of the poller serves every socket that became
// ready meanwhile.

// polledEngine is the engine as the poller's handler; a type of its own
// so that Ready is not part of the Engine's API.
type polledEngine Engine

// joinPoller registers the engine with the shared poller when its
// transport can be served so; otherwise the engine keeps a receive
// goroutine (New starts it when e.polled is nil).
func (e *Engine) joinPoller() error {
	if rn, ok := e.tr.(datapath.ReadyNotifier); ok {
		e.onPoller = true // before the transport can call Ready
		stop, ok, err := rn.NotifyReady(func() { (*polledEngine)(e).Ready(0) })
		if err != nil || !ok {
			e.onPoller = false
			return err
		}
		e.polled = stop
		return nil
	}
	sp, ok := e.tr.(datapath.SharedPollable)
	if !ok {
		return nil
	}
	fd, ok := sp.PollFD()
	if !ok {
		return nil
	}
	e.onPoller = true // before the poller can call Ready
	r, err := rxpoll.Register(fd, (*polledEngine)(e))
	if err != nil {
		e.onPoller = false
		return err
	}
	e.polled = r.Remove
	return nil
}

// Ready implements rxpoll.Handler: one receive batch without waiting, as
// the receive goroutine would run it. The epoll set is level triggered, so
// what this batch leaves is reported again in the poller's next round.
func (pe *polledEngine) Ready(events uint32) {
	e := (*Engine)(pe)
	if events&unix.EPOLLERR != 0 {
		if sp, ok := e.tr.(datapath.SharedPollable); ok {
			sp.ErrorReady()
		}
	}
	e.rxMu.Lock()
	n, err := e.progressLocked(false)
	delivered := e.rxDelivered
	e.rxMu.Unlock()
	if err != nil {
		e.stats.rxErrors.Add(1)
		return
	}
	if n > 0 && e.rxDeferred.Load() {
		// The batch deferred its responses past what the application
		// may answer at once (deferRx): let a reader its completions
		// woke do so, as the receive goroutine does, then send what is
		// still deferred rather than leave it to the next datagram or
		// the timer (the receive goroutine's next batch sends it).
		if delivered > 0 {
			runtime.Gosched()
		}
		if e.rxDeferred.Load() {
			e.rxMu.Lock()
			e.batchMu.Lock()
			e.flushRx()
			e.batchMu.Unlock()
			e.rxMu.Unlock()
		}
	}
}

// Prefetch implements rxpoll.Prefetcher: it hints the engine's
// per-operation lines (hintHot: the locks, the receive packets, the
// initiator state's heads, the counters) and the decoder's header and
// first response descriptor, by their addresses, so that nothing here
// waits for the cold engine.
// With 10,000 engines on the poller each one's state is out of cache when
// its response arrives; a round's Ready calls then took their misses one
// engine after the other.
func (pe *polledEngine) Prefetch() {
	e := (*Engine)(pe)
	e.hintHot()
	a := [...]uintptr{
		uintptr(unsafe.Pointer(&e.rxDec)),
		uintptr(unsafe.Pointer(&e.rxDec.Resps[0])),
	}
	prefetch.Addrs(&a[0], len(a))
}
