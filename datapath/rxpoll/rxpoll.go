// Package rxpoll is a receive poller shared by many transports: one
// goroutine waits for the descriptors of all of them in one epoll set and
// calls each ready one's handler, which receives a batch from it without
// waiting.
//
// Why: a process with thousands of endpoints (10,000 initiators against
// one target, issue 17) gave each its own receive goroutine parked in Go's
// netpoller on its own socket. Every operation then woke a goroutine and
// cost it, besides the receive that got the response, an empty receive
// before parking again and an error-queue check (an ICMP error that a send
// consumed leaves no wake-up behind), at 1,000 peers 4 system calls per
// operation where one busy socket needs 1.3. Here the epoll set is level
// triggered: a descriptor is reported while it has datagrams queued, so a
// handler receives once per report and parks nothing; EPOLLERR is reported
// while the socket's error queue holds a bounced datagram, so nobody needs
// to look there on speculation; and one wake-up of the poller's goroutine
// serves every socket that became ready meanwhile.
//
// The epoll descriptor itself sits in Go's netpoller (it is readable while
// any descriptor in the set is ready), so the poller parks its goroutine,
// not an OS thread, when nothing is ready.
//
// Handlers run on the poller's goroutine one after another: a handler that
// blocks holds up every other registration in the process. The handlers of
// one wake-up's ready descriptors form a round, and a RoundHook
// (AddRoundHook, rounds.go) hears when a round starts, with its
// descriptors, and when it ends: datapath/udp's ring sender receives from
// all of the round's sockets and sends what their handlers sent in one
// system call each (udp.Options.RingSend). Before the hooks, a handler
// that is a Prefetcher is asked to hint its state's cache lines, so that
// the round's handlers, each cold with thousands of registrations, do not
// take their misses one after the other (reliable's engines do; at 10,000
// peers their receive path's own time fell by a quarter).
//
// Parking. With the spin set (SetSpin), a round that found ready
// descriptors is followed, when the next look finds none, by more looks
// for up to the spin, yielding the processor between them, before the
// goroutine parks: under a steady stream of datagrams (thousands of
// endpoints each with an operation in flight) the next one usually comes
// within microseconds, and a park costs the netpoller's blocking
// epoll_wait, a thread sleep and a wake-up (a context switch per datagram
// or two). An idle poller parks at once: the spin is counted from the
// last round that found something. Off (0) by default: it pays only with
// a core to spare for the looks.
package rxpoll

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// Handler is what a registration runs when its descriptor is ready.
type Handler interface {
	// Ready is called on the poller's goroutine with the epoll events
	// (unix.EPOLLIN, unix.EPOLLERR, ...) reported for the descriptor. It
	// should receive one batch without waiting: a descriptor still
	// readable afterwards is reported again in the next round, after
	// the other ready ones had their turn.
	Ready(events uint32)
}

// Prefetcher is a Handler that can ask the CPU for the state its Ready
// will touch without waiting for it. With thousands of descriptors each
// handler's state is out of cache when its descriptor becomes ready, and
// its Ready would take those misses one after the other; the poller calls
// Prefetch on every ready handler of a round first, before the round's
// hooks (whose RoundStart receives for all of them in one system call), so
// that the misses of the whole round are in flight together. Prefetch must
// only compute addresses and hint them (internal/prefetch): it runs with
// the poller's registrations locked for reading, for handlers that may be
// in the middle of their removal.
type Prefetcher interface {
	Prefetch()
}

// maxEvents is the most ready descriptors one round takes from the kernel.
const maxEvents = 256

// Poller is an epoll set with one goroutine serving it.
type Poller struct {
	epfd int
	file *os.File // epfd, so that Go's netpoller can wait for it
	raw  syscall.RawConn

	mu   sync.RWMutex // guards regs, pfs and free
	regs []*Registration
	// pfs are the handlers of regs that are Prefetchers (nil for the
	// others), by id: the round reads them without loading the cold
	// Registration.
	pfs   []Prefetcher
	free  []uint32
	count int

	events []unix.EpollEvent // the poller goroutine's
	ready  []*Registration   // the registrations of events, resolved
	// readyFDs are their descriptors, for the round hooks.
	readyFDs []int
	n        int // events of the current round
	waitFn   func(fd uintptr) bool
	done     chan struct{} // closed when the goroutine ends
	// lastReady is when a look last found ready descriptors (the poller
	// goroutine's, for the spin).
	lastReady time.Time
	stopping  atomic.Bool // stopIfIdle is closing the epoll descriptor: spin no more
}

// spin is the process's spin before parking (SetSpin), in nanoseconds.
var spin atomic.Int64

// SetSpin sets how long the poller looks for ready descriptors, yielding
// between looks, after the last round that found some, before it parks
// (see "Parking" in the package doc); 0, the default, parks at once. It
// applies from the poller's next look on.
func SetSpin(d time.Duration) { spin.Store(int64(max(d, 0))) }

// Registration is one descriptor in a Poller.
type Registration struct {
	p  *Poller
	id uint32
	fd int
	h  Handler
	// mu is held while the handler runs, so that Remove can wait for a
	// run under way.
	mu      sync.Mutex
	removed bool
}

// The process's poller: started by the first Register, stopped (its
// goroutine gone, its epoll descriptor closed) when the last registration
// is removed, so that nothing outlives the endpoints that used it.
var (
	sharedMu sync.Mutex
	shared   *Poller
)

// Register adds fd to the process's poller (see Add), starting it if
// needed. It serves descriptors of any network namespace.
func Register(fd int, h Handler) (*Registration, error) {
	sharedMu.Lock()
	if shared == nil {
		p, err := newPoller()
		if err != nil {
			sharedMu.Unlock()
			return nil, err
		}
		shared = p
		go p.run()
	}
	p := shared
	r, err := p.Add(fd, h)
	sharedMu.Unlock()
	if err != nil {
		stopIfIdle(p) // a poller started for nothing does not stay
	}
	return r, err
}

// Running reports whether the process's poller exists (tests: it must not
// outlive its last registration).
func Running() bool {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return shared != nil
}

// stopIfIdle stops p when it is the process's poller and has no
// registration left, and waits for its goroutine to end.
func stopIfIdle(p *Poller) {
	sharedMu.Lock()
	if shared != p || p.Len() > 0 {
		sharedMu.Unlock()
		return
	}
	shared = nil
	sharedMu.Unlock()
	p.stopping.Store(true)
	p.file.Close() // the goroutine's next wait fails
	<-p.done
}

func newPoller() (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("rxpoll: epoll_create1: %w", fi.Errno(err.(syscall.Errno)))
	}
	// Non-blocking, so that os.NewFile puts it in Go's netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("rxpoll: %w", fi.Errno(err.(syscall.Errno)))
	}
	f := os.NewFile(uintptr(epfd), "rxpoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("rxpoll: %w", err)
	}
	p := &Poller{epfd: epfd, file: f, raw: raw, events: make([]unix.EpollEvent, maxEvents),
		ready: make([]*Registration, 0, maxEvents), readyFDs: make([]int, 0, maxEvents), done: make(chan struct{})}
	p.waitFn = p.poll
	return p, nil
}

// Add puts fd in the set (level triggered, EPOLLIN; EPOLLERR is always
// reported) with h to run when it is ready. fd must stay open until
// Remove returns.
func (p *Poller) Add(fd int, h Handler) (*Registration, error) {
	if fd < 0 || h == nil {
		return nil, fmt.Errorf("rxpoll add: no descriptor or handler: %w", fi.EINVAL)
	}
	r := &Registration{p: p, fd: fd, h: h}
	pf, _ := h.(Prefetcher)
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 {
		r.id = p.free[k-1]
		p.free = p.free[:k-1]
		p.regs[r.id], p.pfs[r.id] = r, pf
	} else {
		r.id = uint32(len(p.regs))
		p.regs = append(p.regs, r)
		p.pfs = append(p.pfs, pf)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(r.id)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		p.regs[r.id], p.pfs[r.id] = nil, nil
		p.free = append(p.free, r.id)
		return nil, fmt.Errorf("rxpoll add: epoll_ctl: %w", fi.Errno(err.(syscall.Errno)))
	}
	p.count++
	return r, nil
}

// Len is the number of registrations.
func (p *Poller) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.count
}

// Remove takes the descriptor out of the set and waits for a run of its
// handler under way: once Remove returns, the handler is not running and
// will not be called again, and the descriptor may be closed. The last
// registration's removal stops the process's poller and waits for its
// goroutine, so Remove must not be called from any handler. Removing twice
// is a no-op.
func (r *Registration) Remove() {
	p := r.p
	p.mu.Lock()
	if p.regs[r.id] == r {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, r.fd, nil)
		p.regs[r.id], p.pfs[r.id] = nil, nil
		p.free = append(p.free, r.id)
		p.count--
	}
	p.mu.Unlock()
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
	stopIfIdle(p)
}

// run is the poller's goroutine: wait for ready descriptors (parked in the
// netpoller while there are none), run their handlers, repeat.
func (p *Poller) run() {
	defer close(p.done)
	for {
		p.n = 0
		if err := p.raw.Read(p.waitFn); err != nil {
			return // the epoll descriptor was closed (stopIfIdle)
		}
		p.dispatch()
	}
}

// poll is the RawConn.Read callback: epoll_wait without blocking, again
// while the spin since the last ready round lasts (yielding between
// looks); returning false parks the goroutine until the epoll descriptor
// is readable. Spinning in the callback keeps the descriptor referenced:
// stopIfIdle's Close takes effect when it returns.
func (p *Poller) poll(fd uintptr) bool {
	for {
		n, err := epollPoll(fd, p.events)
		if err == unix.EINTR {
			continue
		}
		if err == nil && n > 0 {
			p.n = n
			if spin.Load() > 0 {
				p.lastReady = time.Now()
			}
			return true
		}
		if err != nil {
			return false
		}
		d := spin.Load()
		if d == 0 || time.Since(p.lastReady) > time.Duration(d) || p.stopping.Load() {
			return false
		}
		runtime.Gosched()
	}
}

// dispatch runs the handlers of the round's events. The registrations are
// resolved first, under the read lock, so that a handler may Add (an
// OnComplete that opens an endpoint) without deadlocking; one removed
// meanwhile is skipped under its own lock.
func (p *Poller) dispatch() {
	hs := roundHooks()
	p.ready, p.readyFDs = p.ready[:0], p.readyFDs[:0]
	p.mu.RLock()
	for i := 0; i < p.n; i++ {
		id := uint32(p.events[i].Fd)
		var r *Registration
		if int(id) < len(p.regs) {
			r = p.regs[id]
			if pf := p.pfs[id]; pf != nil {
				pf.Prefetch()
			}
			if r != nil {
				a := uintptr(unsafe.Pointer(r))
				prefetch.Addrs(&a, 1)
			}
		}
		p.ready = append(p.ready, r)
	}
	p.mu.RUnlock()
	if len(hs) > 0 {
		for _, r := range p.ready {
			if r != nil {
				p.readyFDs = append(p.readyFDs, r.fd)
			}
		}
	}
	for _, h := range hs {
		h.RoundStart(p.readyFDs)
	}
	defer func() {
		for _, h := range hs {
			h.RoundEnd()
		}
	}()
	for i, r := range p.ready {
		if r == nil {
			continue
		}
		r.mu.Lock()
		if !r.removed {
			r.h.Ready(p.events[i].Events)
		}
		r.mu.Unlock()
		p.ready[i] = nil
	}
}

// epollPoll is epoll_wait with a zero timeout, as a raw system call: it
// never blocks, so telling the scheduler about it (entersyscall) buys
// nothing, and costs a lot under load. The runtime's monitor (sysmon)
// takes the processor away from a goroutine that has been in a system
// call for a tick (20 µs, kept that short while it keeps finding such
// calls): it hands the processor to another thread, which a busy poller
// then has to take back. With thousands of sockets that was a thread
// wake-up and a context switch every few operations (sysmon's usleep
// alone was 8 % of an initiator process's samples at 10,000 peers).
func epollPoll(fd uintptr, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
