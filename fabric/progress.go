package fabric

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is enum fi_progress: who makes the datapath move.
type Progress int

// Progress modes, numbered as in fabric.h.
const (
	ProgressUnspec Progress = iota // FI_PROGRESS_UNSPEC: the provider's choice, ProgressAuto
	ProgressAuto                   // FI_PROGRESS_AUTO: a goroutine per endpoint receives and completes
	// ProgressManual (FI_PROGRESS_MANUAL): no receive goroutine; reading a
	// CQ or counter (Read, ReadFrom, SRead, Cntr.Read, Cntr.Wait) processes
	// the incoming packets of the endpoints bound to it, on the caller's
	// goroutine. Both initiators and targets must read to make progress.
	// It saves the cross-thread wake-up of every completion: the lowest
	// latency when the application polls its CQ.
	ProgressManual
)

// spinYieldInterval is how long a spinning reader keeps its processor
// between yields.
const spinYieldInterval = 50 * time.Microsecond

// progressSet is the endpoints whose manual progress reading one CQ or
// counter drives.
type progressSet struct {
	n   atomic.Int32 // len(eps), read without the lock
	mu  sync.Mutex
	eps []*Endpoint // guarded by mu
}

func (s *progressSet) add(ep *Endpoint) {
	s.mu.Lock()
	s.eps = append(s.eps, ep)
	s.n.Store(int32(len(s.eps)))
	s.mu.Unlock()
}

func (s *progressSet) remove(ep *Endpoint) {
	s.mu.Lock()
	for i, e := range s.eps {
		if e == ep {
			s.eps = append(s.eps[:i], s.eps[i+1:]...)
			break
		}
	}
	s.n.Store(int32(len(s.eps)))
	s.mu.Unlock()
}

// manual reports whether reads must drive progress.
func (s *progressSet) manual() bool { return s.n.Load() > 0 }

// run processes what each endpoint's transport has received, without
// blocking, and returns the packets handled. No lock of the set is held
// while an endpoint progresses (its completions take the endpoint's and the
// CQ's locks, and Bind/Close take the set's lock under the endpoint's).
func (s *progressSet) run() int {
	if s.n.Load() == 0 {
		return 0
	}
	var chunk [16]*Endpoint
	total := 0
	for off := 0; ; off += len(chunk) {
		s.mu.Lock()
		k := 0
		if off < len(s.eps) {
			k = copy(chunk[:], s.eps[off:])
		}
		s.mu.Unlock()
		for _, ep := range chunk[:k] {
			if eng := ep.engine(); eng != nil {
				n, _ := eng.Progress(false)
				total += n
			}
		}
		if k < len(chunk) {
			return total
		}
	}
}

// spin drives progress until done reports true or timeoutMs passes
// (negative: forever); it reports whether done held. It yields the
// processor once per spinYieldInterval so that goroutines waiting for this
// P (the application's, the engine's timer) run.
//
// Not more often: runtime.Gosched wakes an idle P's thread to look for
// work, which then spins on another core. Yielding on every idle round
// cost a spinning initiator 7 % of its CPU in the scheduler (perf) and, on
// a 2-core machine, took CPU from the peer process.
func (s *progressSet) spin(timeoutMs int, done func() bool) bool {
	start := time.Now()
	var deadline time.Time
	if timeoutMs >= 0 {
		deadline = start.Add(time.Duration(timeoutMs) * time.Millisecond)
	}
	lastYield := start
	for i := 1; ; i++ {
		if s.run() == 0 {
			if done() {
				return true
			}
		} else if done() {
			return true
		}
		if i&63 != 0 {
			continue
		}
		now := time.Now()
		if timeoutMs >= 0 && !now.Before(deadline) {
			return done()
		}
		if now.Sub(lastYield) >= spinYieldInterval {
			runtime.Gosched()
			lastYield = now
		}
	}
}
