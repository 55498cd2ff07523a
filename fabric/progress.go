package fabric

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/internal/spinyield"
)

// Progress is enum fi_progress: who makes the datapath move.
type Progress int

// Progress modes, numbered as in fabric.h.
const (
	ProgressUnspec Progress = iota // FI_PROGRESS_UNSPEC: the provider's choice, ProgressAuto
	// ProgressAuto (FI_PROGRESS_AUTO): a goroutine per endpoint receives
	// and completes. A goroutine blocked in SRead or Cntr.Wait takes over
	// the receiving meanwhile when it can (its endpoints' transports can
	// be polled, no busy polling): it polls them for a short adaptive
	// time, then sleeps in poll(2) on their sockets (spinpark.go), and
	// processes what arrives itself, so the packet that completes its
	// operation wakes its thread directly instead of the receive
	// goroutine's, which would then have to wake it. So does a Read that
	// finds the CQ empty, without waiting (Engine.Poll), and a Cntr.Read
	// that finds the counter unchanged since the last read: a reader
	// spinning on its CQ or counter receives its completions itself, and
	// once it polls in a loop (reads within reliable's pollSpinGap of
	// each other) the receive goroutine stands down (sleeps) instead of
	// competing for the packets. It resumes receiving 1 ms
	// (reliable's assistHold) after the last such read, or after the
	// last blocked reader returns: a target whose application stops
	// calling into the provider is served again.
	ProgressAuto
	// ProgressManual (FI_PROGRESS_MANUAL): no receive goroutine; reading a
	// CQ or counter (Read, ReadFrom, SRead, Cntr.Read, Cntr.Wait) processes
	// the incoming packets of the endpoints bound to it, on the caller's
	// goroutine. Both initiators and targets must read to make progress.
	// It saves the cross-thread wake-up of every completion: the lowest
	// latency when the application polls its CQ. A blocking read (SRead,
	// Cntr.Wait) spins while packets come and, after an adaptive polling
	// time with none (at most 100 µs, spinpark.go), sleeps in poll(2) on
	// the endpoints' sockets (AF_XDP and kernel) until a packet, a
	// completion or counter change from another goroutine, fi_cq_signal
	// or its timeout: an idle reader costs no CPU.
	ProgressManual
)

// spinYieldInterval is how long a spinning reader keeps its processor
// between yields.
const spinYieldInterval = 50 * time.Microsecond

// spinBeforeSleep is the longest a blocking reader polls with nothing
// arriving before it sleeps in poll(2) on the endpoints' descriptors (its
// polling time adapts below this: spinpark.go). Round trips on a veth
// pair take 8-30 µs, so a reader waiting for a completion keeps polling,
// while one waiting for traffic that does not come stops burning its core
// after this long.
const spinBeforeSleep = 100 * time.Microsecond

// sleepSlice bounds one poll(2): a sleeping reader re-checks its condition
// and the endpoint set at least this often, whatever wakes it or not.
const sleepSlice = 100 * time.Millisecond

// progressSet is the endpoints bound to one CQ or counter, whose progress
// its readers drive (manual progress) or assist (auto progress, in SRead
// and Cntr.Wait: beginAssist), and the readers sleeping on them.
//
// A reader that found nothing for spinBeforeSleep sleeps in poll(2) on the
// descriptors of every endpoint's transport (datapath.Pollable) and on the
// set's eventfd, which wake and interrupt write when a reader sleeps: a
// completion or counter change made by another goroutine, fi_cq_signal, an
// endpoint joining or leaving. A reader holds pollMu for reading from
// gathering the descriptors until it leaves poll(2); remove and close take
// it for writing after waking the sleepers, so no transport is closed, and
// no eventfd either, under a poll on its descriptor.
type progressSet struct {
	// auto: the domain has auto progress, so the endpoints have receive
	// goroutines and readers only assist them (Engine.Assist); else
	// readers drive the endpoints (Engine.Progress). Set at open.
	auto bool
	est  spinEstimate // how long blocking reads wait: how long they poll before sleeping
	// lastRx is when a reader's round last received a packet (spinpark.go).
	lastRx lastPacket
	n      atomic.Int32 // len(eps), read without the lock
	// only is eps[0] while it is the one endpoint, else nil: each runs
	// it without taking mu, which with one endpoint per CQ (the usual
	// case) was a lock pair per read for a copy of one pointer.
	only atomic.Pointer[Endpoint]
	mu   sync.Mutex
	eps  []*Endpoint // guarded by mu

	pollMu   sync.RWMutex
	closed   bool         // guarded by pollMu: nobody sleeps any more
	sleepers atomic.Int32 // readers that may be in poll(2)
	intr     atomic.Uint64
	fdMu     sync.Mutex
	wakeFD   int // guarded by fdMu: eventfd+1, 0 before the first endpoint or once closed
}

func (s *progressSet) add(ep *Endpoint) {
	s.fdMu.Lock()
	if s.wakeFD == 0 {
		if fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err == nil {
			s.wakeFD = fd + 1
		}
	}
	s.fdMu.Unlock()
	s.mu.Lock()
	s.eps = append(s.eps, ep)
	s.published()
	s.mu.Unlock()
	s.kick() // sleepers poll the new endpoint's descriptors too
}

// remove drops ep after every reader has left poll(2) on its descriptors:
// the endpoint may close its transport when this returns. Call it without
// holding the endpoint's lock (a sleeper takes it to find the transport).
func (s *progressSet) remove(ep *Endpoint) {
	s.kick()
	s.pollMu.Lock()
	s.mu.Lock()
	for i, e := range s.eps {
		if e == ep {
			s.eps = append(s.eps[:i], s.eps[i+1:]...)
			break
		}
	}
	s.published()
	s.mu.Unlock()
	s.pollMu.Unlock()
}

// published updates n and only after eps changed; mu is held.
func (s *progressSet) published() {
	s.n.Store(int32(len(s.eps)))
	if len(s.eps) == 1 {
		s.only.Store(s.eps[0])
	} else {
		s.only.Store(nil)
	}
}

// close wakes the sleepers and releases the eventfd; readers spin from then
// on (the CQ or counter is closed, so they return). Call it without locks.
func (s *progressSet) close() {
	s.kick()
	s.pollMu.Lock()
	s.closed = true
	s.fdMu.Lock()
	if s.wakeFD != 0 {
		unix.Close(s.wakeFD - 1)
		s.wakeFD = 0
	}
	s.fdMu.Unlock()
	s.pollMu.Unlock()
}

// wake tells sleeping readers that their condition may hold now. Call it
// after making the change visible to their done check.
func (s *progressSet) wake() {
	if s.sleepers.Load() > 0 {
		s.kick()
	}
}

// interrupt makes the readers in spin return (fi_cq_signal).
func (s *progressSet) interrupt() {
	s.intr.Add(1)
	s.kick()
}

// kick makes the eventfd readable.
func (s *progressSet) kick() {
	s.fdMu.Lock()
	if s.wakeFD != 0 {
		var one [8]byte
		one[0] = 1 // little-endian 1; the counter only has to be non-zero
		_, _ = unix.Write(s.wakeFD-1, one[:])
	}
	s.fdMu.Unlock()
}

// manual reports whether reads must drive progress.
func (s *progressSet) manual() bool { return !s.auto && s.n.Load() > 0 }

// assistMax is the most endpoints one reader assists; a CQ or counter
// with more bound waits for its wait object instead.
const assistMax = 4

// beginAssist makes the calling reader assist every endpoint's receive
// goroutine (auto progress: Engine.BeginAssist) and returns the engines it
// assists, to hand to endAssist; ok false (no endpoint, too many, one not
// enabled or busy polling, a transport that cannot be polled) means the
// reader waits for its wait object as usual.
func (s *progressSet) beginAssist(dst *[assistMax]*reliable.Engine) (engines []*reliable.Engine, ok bool) {
	if !s.auto || s.n.Load() == 0 {
		return nil, false
	}
	// The endpoints are copied out: ep.engine takes the endpoint's lock,
	// which Bind holds while it takes s.mu (add).
	var eps [assistMax]*Endpoint
	s.mu.Lock()
	k := len(s.eps)
	if k <= assistMax {
		copy(eps[:], s.eps)
	}
	s.mu.Unlock()
	if k > assistMax {
		return nil, false
	}
	engines = dst[:0]
	for _, ep := range eps[:k] {
		eng := ep.engine()
		if eng == nil || !eng.BeginAssist() {
			endAssist(engines)
			return nil, false
		}
		engines = append(engines, eng)
	}
	return engines, len(engines) > 0
}

// assistedWait is the auto-progress wait of SRead and Cntr.Wait: the
// reader assists its endpoints (beginAssist) and waits in assistWait until
// done holds (held), the deadline passes unless forever (waited, not held),
// or an interrupt. waited false and held false: the reader cannot assist,
// or the transports stopped being pollable; the caller waits for its wait
// object for the rest of its time instead.
func (s *progressSet) assistedWait(deadline time.Time, forever bool, done func() bool) (held, waited bool) {
	var engs [assistMax]*reliable.Engine
	assisted, ok := s.beginAssist(&engs)
	if !ok {
		return false, false
	}
	defer endAssist(assisted)
	return s.assistWait(deadline, forever, done)
}

// endAssist ends what beginAssist began.
func endAssist(engines []*reliable.Engine) {
	for _, eng := range engines {
		eng.EndAssist()
	}
}

// run processes what each endpoint's transport has received, without
// blocking, and returns the packets handled. No lock of the set is held
// while an endpoint progresses (its completions take the endpoint's and the
// CQ's locks, and Bind/Close take the set's lock under the endpoint's).
func (s *progressSet) run() int {
	if s.auto {
		return 0
	}
	return s.drive()
}

// poll is run for a reader of an auto-progress CQ that found it empty
// (fi_cq_read in a loop): each endpoint's Engine.Poll, so a spinning
// reader receives for the endpoints itself (no wake-up of the receive
// goroutine per packet) and gets what completes at once.
func (s *progressSet) poll() int {
	if !s.auto {
		return 0
	}
	return s.each((*reliable.Engine).Poll)
}

// drive runs every endpoint once without waiting: Progress for manual
// progress, Assist (when no other goroutine receives) for auto.
func (s *progressSet) drive() int {
	if s.auto {
		return s.each((*reliable.Engine).Assist)
	}
	return s.each(progressOnce)
}

// progressOnce is Engine.Progress without waiting, as each wants it.
func progressOnce(eng *reliable.Engine) int {
	n, _ := eng.Progress(false)
	return n
}

// each calls f for every endpoint's engine and returns the sum.
func (s *progressSet) each(f func(*reliable.Engine) int) int {
	if s.n.Load() == 0 {
		return 0
	}
	if ep := s.only.Load(); ep != nil {
		// As below, the endpoint may leave the set while f runs.
		if eng := ep.engine(); eng != nil {
			return f(eng)
		}
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
				total += f(eng)
			}
		}
		if k < len(chunk) {
			return total
		}
	}
}

// spin drives progress until done reports true, timeoutMs passes
// (negative: forever) or interrupt is called; it reports whether done
// held. It yields the processor once per spinYieldInterval so that
// goroutines waiting for this P (the application's, the engine's timer)
// run, and once its adaptive polling time (spinpark.go; spinBeforeSleep
// after a packet came) has passed without a packet it sleeps in poll(2)
// until a packet or a wake-up comes (when every endpoint's transport can
// be polled; else it keeps spinning). A round that finds nothing looks at
// the clock and may offer the thread's processor to other threads
// (spinyield.Yielder); while packets come it looks every 64 rounds only.
//
// Not Gosched more often: runtime.Gosched wakes an idle P's thread to
// look for work, which then spins on another core. Yielding on every idle
// round cost a spinning initiator 7 % of its CPU in the scheduler (perf)
// and, on a 2-core machine, took CPU from the peer process.
func (s *progressSet) spin(timeoutMs int, done func() bool) bool {
	start := time.Now()
	var deadline time.Time
	if timeoutMs >= 0 {
		deadline = start.Add(time.Duration(timeoutMs) * time.Millisecond)
	}
	// Until a packet comes the reader polls for its adaptive time, or
	// until spinBeforeSleep after the last packet the set received
	// before this wait if that is later (spinpark.go, "After a
	// packet"); once packets come (it serves a target's requests too)
	// for spinBeforeSleep after the last one, so that traffic in flight
	// is served without a wake-up per request.
	budget, lastBusy := s.pollFrom(start)
	intr0 := s.intr.Load()
	lastYield := start
	busy := false
	var yielder spinyield.Yielder
	for i := 1; ; i++ {
		if s.run() > 0 {
			s.noteRx()
			busy = true
			budget = spinBeforeSleep
			// What it received may have been answered, waking a peer
			// that may share this processor: yield at the next empty
			// round again.
			yielder.Reset()
		}
		if done() {
			if i > 1 {
				s.est.record(time.Since(start))
			}
			return true
		}
		if busy && i&63 != 0 {
			continue
		}
		now := time.Now()
		if s.intr.Load() != intr0 || (timeoutMs >= 0 && !now.Before(deadline)) {
			if timeoutMs != 0 {
				s.est.record(now.Sub(start))
			}
			return done()
		}
		switch {
		case busy:
			busy, lastBusy = false, now
		case now.Sub(lastBusy) >= budget:
			slice := sleepSlice
			if timeoutMs >= 0 {
				slice = min(slice, deadline.Sub(now))
			}
			if held, _ := s.sleep(slice, intr0, done); held {
				s.est.record(time.Since(start))
				return true
			}
			now = time.Now()
			lastBusy, lastYield = now, now
			continue
		default:
			yielder.EmptyRound(now)
		}
		if now.Sub(lastYield) >= spinYieldInterval {
			runtime.Gosched()
			lastYield = now
		}
	}
}

// assistWait is spin for a reader assisting auto-progress endpoints
// (beginAssist): it processes what has arrived (Engine.Assist), polls
// for its adaptive polling time (spinpark.go) when a round finds nothing,
// then sleeps in poll(2) on the endpoints' descriptors, until done holds,
// the deadline passes (unless forever) or interrupt is called; held
// reports done. ok false means the transports cannot be polled (any
// more): the caller waits for its wait object for the rest of its time
// instead.
func (s *progressSet) assistWait(deadline time.Time, forever bool, done func() bool) (held, ok bool) {
	intr0 := s.intr.Load()
	var start, spinUntil time.Time // from the first round that found nothing
	var yielder spinyield.Yielder
	for {
		if s.drive() > 0 {
			s.noteRx()
			if done() {
				s.recordWait(start)
				return true, true
			}
			yielder.Reset() // as in spin: an answer may have woken a peer here
			continue
		}
		if done() {
			s.recordWait(start)
			return true, true
		}
		now := time.Now()
		if start.IsZero() {
			budget, from := s.pollFrom(now)
			start, spinUntil = now, from.Add(budget)
		}
		if s.intr.Load() != intr0 || (!forever && !now.Before(deadline)) {
			s.recordWait(start)
			return done(), true
		}
		if now.Before(spinUntil) {
			yielder.EmptyRound(now)
			continue
		}
		slice := sleepSlice
		if !forever {
			slice = min(slice, deadline.Sub(now))
		}
		held, slept := s.sleep(slice, intr0, done)
		switch {
		case held:
			s.recordWait(start)
			return true, true
		case !slept:
			return done(), false
		}
	}
}

// recordWait adds a wait that began at start (zero: it did not wait) to
// the set's estimate.
func (s *progressSet) recordWait(start time.Time) {
	if !start.IsZero() {
		s.est.record(time.Since(start))
	}
}

// sleep waits in poll(2), at most d, for a datagram on any endpoint's
// transport or a wake-up. It returns at once, held true, when done holds:
// done may consume what it found (an SRead's completions), so the caller
// must not ask again but return. It returns at once when an interrupt
// came, and with slept false, without waiting, when it cannot sleep: the
// set is closed or some endpoint's transport cannot be polled.
func (s *progressSet) sleep(d time.Duration, intr0 uint64, done func() bool) (held, slept bool) {
	s.sleepers.Add(1)
	defer s.sleepers.Add(-1)
	// Registered as a sleeper first, then checked: a change made after
	// this check sees the sleeper and kicks (wake), one made before it is
	// seen here.
	if done() {
		return true, true
	}
	if s.intr.Load() != intr0 {
		return false, true
	}
	s.pollMu.RLock()
	defer s.pollMu.RUnlock()
	s.fdMu.Lock()
	wakeFD := s.wakeFD - 1
	s.fdMu.Unlock()
	if s.closed || wakeFD < 0 {
		return false, false
	}
	// On the stack (Engine.PollFDs copies into it): a sleep allocates
	// nothing unless the endpoints have more descriptors than this.
	var buf [32]unix.PollFd
	fds := append(buf[:0], unix.PollFd{Fd: int32(wakeFD), Events: unix.POLLIN})
	s.mu.Lock()
	eps := s.eps
	s.mu.Unlock()
	for _, ep := range eps {
		eng := ep.engine()
		if eng == nil {
			return false, false
		}
		var ok bool
		if fds, ok = eng.PollFDs(fds); !ok {
			return false, false
		}
	}
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	if _, err := unix.Poll(fds, ms); err != nil && err != unix.EINTR {
		return false, false
	}
	if fds[0].Revents != 0 {
		var b [8]byte
		_, _ = unix.Read(wakeFD, b[:])
	}
	return false, true
}
