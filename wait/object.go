package wait

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// Command is a fi_control command number (fabric.h) understood by wait
// objects and by the queues that have one.
type Command int

// Control commands, numbered as in fabric.h.
const (
	GetWait    Command = 5  // FI_GETWAIT: arg *int (FD) or *MutexCond (MUTEX_COND)
	GetWaitObj Command = 16 // FI_GETWAITOBJ: arg *fi.WaitObj

	// SetNotify is xdpfab's own (no fabric.h command has its number): arg
	// is a func() the object calls after every broadcast of its MutexCond
	// (every Signal, and Close), or nil to stop. A wait object exported
	// outside Go, the C provider's pthread mutex and cond for
	// FI_WAIT_MUTEX_COND, is woken this way. MutexCond objects only.
	SetNotify Command = 1 << 20
)

func (c Command) String() string {
	switch c {
	case GetWait:
		return "FI_GETWAIT"
	case GetWaitObj:
		return "FI_GETWAITOBJ"
	case SetNotify:
		return "SetNotify"
	}
	return fmt.Sprintf("Command(%d)", int(c))
}

// MutexCond is the Go form of struct fi_mutex_cond, what FI_GETWAIT returns
// for fi.WaitMutexCond. Cond.L is Mutex. The object broadcasts Cond, holding
// Mutex, after every Signal; use it as:
//
//	mc.Mutex.Lock()
//	for q.TryWait() == nil { // nothing pending: safe to sleep
//		mc.Cond.Wait()
//	}
//	mc.Mutex.Unlock()
//	// read the queue
type MutexCond struct {
	Mutex *sync.Mutex
	Cond  *sync.Cond
}

// Object is the wait object of one queue (see the package doc). Its zero
// value is not usable; create it with NewObject.
type Object struct {
	kind fi.WaitObj // FD, MutexCond, Yield or Unspec; immutable

	// waiters counts goroutines registered in Wait. A waiter registers
	// before it checks its condition and Signal reads it after the caller
	// published, so either the waiter sees the event or Signal sees the
	// waiter (both are sequentially consistent).
	waiters atomic.Int32
	// bell holds at most one wake-up token; Signal drops a token when one
	// is already there.
	bell chan struct{}
	// intr is closed by Interrupt (and Close) and then replaced, so
	// every goroutine waiting at that moment returns.
	intr atomic.Pointer[chan struct{}]

	closed atomic.Bool

	// fdSet mirrors "the eventfd counter is non-zero" so that Signal can
	// skip the write(2) while the fd is readable anyway. It is written
	// only with fdMu held.
	fdSet atomic.Bool
	fdMu  sync.Mutex
	fd    int // guarded by fdMu: the eventfd (FD kind), -1 once closed or for other kinds

	mc MutexCond // MutexCond kind only; immutable pointers
	// notify is called after each broadcast of mc (SetNotify).
	notify atomic.Pointer[func()]
}

// NewObject returns a wait object of the given kind: fi.WaitUnspec,
// fi.WaitFD, fi.WaitMutexCond or fi.WaitYield. Other kinds fail with
// FI_EINVAL, except fi.WaitPollFD which fails with FI_ENOSYS.
func NewObject(kind fi.WaitObj) (*Object, error) {
	o := &Object{kind: kind, bell: make(chan struct{}, 1), fd: -1}
	intr := make(chan struct{})
	o.intr.Store(&intr)
	switch kind {
	case fi.WaitUnspec, fi.WaitYield:
	case fi.WaitFD:
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("wait object: eventfd: %w", fi.ErrnoOf(err))
		}
		o.fd = fd
	case fi.WaitMutexCond:
		mu := new(sync.Mutex)
		o.mc = MutexCond{Mutex: mu, Cond: sync.NewCond(mu)}
	case fi.WaitPollFD:
		return nil, fmt.Errorf("wait object: %v: %w", kind, fi.ENOSYS)
	default:
		return nil, fmt.Errorf("wait object: %v: %w", kind, fi.EINVAL)
	}
	return o, nil
}

// Kind returns the object's wait-object kind.
func (o *Object) Kind() fi.WaitObj { return o.kind }

// Signal wakes the goroutines blocked in Wait and marks the exported wait
// object (eventfd readable, Cond broadcast). Call it after making the new
// entry visible to the ready/Pending check, without holding the lock that
// check takes. It does nothing once the object is closed.
func (o *Object) Signal() {
	if o.waiters.Load() > 0 {
		select {
		case o.bell <- struct{}{}:
		default:
		}
	}
	switch o.kind {
	case fi.WaitFD:
		if !o.fdSet.Load() {
			o.setFD()
		}
	case fi.WaitMutexCond:
		o.broadcast()
	}
}

// broadcast wakes the goroutines waiting on the MutexCond and whatever
// SetNotify registered.
func (o *Object) broadcast() {
	o.mc.Mutex.Lock()
	o.mc.Cond.Broadcast()
	o.mc.Mutex.Unlock()
	if f := o.notify.Load(); f != nil {
		(*f)()
	}
}

// setFD makes the eventfd readable.
func (o *Object) setFD() {
	o.fdMu.Lock()
	defer o.fdMu.Unlock()
	if o.fd < 0 || o.fdSet.Load() {
		return
	}
	// Mark before writing: a Reset that sees the mark takes fdMu and so
	// drains after this write; marking after it let a lock-free Reset skip
	// the drain and leave the fd readable past fi_trywait.
	o.fdSet.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	for {
		_, err := unix.Write(o.fd, one[:])
		if err != unix.EINTR {
			// EAGAIN would mean the counter is at its maximum:
			// readable either way.
			break
		}
	}
}

// Reset re-arms the exported wait object: the eventfd is drained so that
// the next Signal makes it readable again. An owner's TryWait calls Reset
// first and then checks for pending entries (fi_trywait(3)); the order is
// what makes a concurrent Signal impossible to lose. Other kinds need no
// re-arming.
func (o *Object) Reset() {
	if o.kind != fi.WaitFD || !o.fdSet.Load() {
		return
	}
	o.fdMu.Lock()
	defer o.fdMu.Unlock()
	if o.fd < 0 || !o.fdSet.Load() {
		return
	}
	o.fdSet.Store(false)
	var buf [8]byte
	for {
		_, err := unix.Read(o.fd, buf[:])
		if err != unix.EINTR {
			break
		}
	}
}

// Interrupt makes every goroutine blocked in Wait at this moment return
// FI_EINTR ("signaled by some external source", fi_eq_sread and
// fi_cq_signal).
func (o *Object) Interrupt() {
	next := make(chan struct{})
	close(*o.intr.Swap(&next))
}

// Wait blocks until ready reports true (nil), the timeout expires
// (FI_ETIMEDOUT), Interrupt or Close is called (FI_EINTR), or returns
// FI_EINVAL at once on a closed object. A negative timeout waits forever, a
// zero one only checks. ready is called without locks held, first before
// anything else, and is the only judge of readiness: Signals without a
// ready condition are spurious wake-ups.
func (o *Object) Wait(timeout time.Duration, ready func() bool) error {
	if o.closed.Load() {
		return fmt.Errorf("wait: closed: %w", fi.EINVAL)
	}
	if ready() {
		return nil
	}
	if timeout == 0 {
		return fi.ETIMEDOUT
	}
	intr := *o.intr.Load()
	if o.closed.Load() { // closed between the first check and loading intr
		return fi.EINTR
	}
	if o.kind == fi.WaitYield {
		return spin(timeout, ready, intr)
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := timerPool.Get().(*time.Timer)
		t.Reset(timeout)
		defer func() { t.Stop(); timerPool.Put(t) }()
		expired = t.C
	}
	o.waiters.Add(1)
	defer o.waiters.Add(-1)
	for {
		if ready() {
			o.passOn()
			return nil
		}
		select {
		case <-o.bell:
		case <-intr:
			return fi.EINTR
		case <-expired:
			if ready() {
				o.passOn()
				return nil
			}
			return fi.ETIMEDOUT
		}
	}
}

// passOn hands the wake-up token to the next waiter, if any, so that one
// Signal wakes every waiter in turn and each re-checks its condition.
func (o *Object) passOn() {
	if o.waiters.Load() > 1 {
		select {
		case o.bell <- struct{}{}:
		default:
		}
	}
}

// spin is FI_WAIT_YIELD's wait: check, yield, check again.
func spin(timeout time.Duration, ready func() bool, intr <-chan struct{}) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		runtime.Gosched()
		if ready() {
			return nil
		}
		select {
		case <-intr:
			return fi.EINTR
		default:
		}
		if timeout > 0 && !time.Now().Before(deadline) {
			return fi.ETIMEDOUT
		}
	}
}

// timerPool recycles the timers of timed waits (Go 1.23 timers need no
// draining after Stop).
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// Control is fi_control on the wait object: FI_GETWAIT stores the eventfd
// into an *int (FD kind) or the pair into a *MutexCond (MutexCond kind) and
// fails with FI_ENODATA for kinds that have nothing to retrieve;
// FI_GETWAITOBJ stores the kind into a *fi.WaitObj. A wrong arg type fails
// with FI_EINVAL, an unknown command with FI_ENOSYS.
func (o *Object) Control(cmd Command, arg any) error {
	if o.closed.Load() {
		return fmt.Errorf("wait control: closed: %w", fi.EINVAL)
	}
	switch cmd {
	case GetWait:
		switch o.kind {
		case fi.WaitFD:
			p, ok := arg.(*int)
			if !ok || p == nil {
				return fmt.Errorf("wait control: FI_GETWAIT on %v wants *int, got %T: %w", o.kind, arg, fi.EINVAL)
			}
			o.fdMu.Lock()
			fd := o.fd
			o.fdMu.Unlock()
			if fd < 0 {
				return fmt.Errorf("wait control: closed: %w", fi.EINVAL)
			}
			*p = fd
			return nil
		case fi.WaitMutexCond:
			p, ok := arg.(*MutexCond)
			if !ok || p == nil {
				return fmt.Errorf("wait control: FI_GETWAIT on %v wants *wait.MutexCond, got %T: %w", o.kind, arg, fi.EINVAL)
			}
			*p = o.mc
			return nil
		}
		return fmt.Errorf("wait control: %v has no retrievable wait object: %w", o.kind, fi.ENODATA)
	case GetWaitObj:
		p, ok := arg.(*fi.WaitObj)
		if !ok || p == nil {
			return fmt.Errorf("wait control: FI_GETWAITOBJ wants *fi.WaitObj, got %T: %w", arg, fi.EINVAL)
		}
		*p = o.kind
		return nil
	case SetNotify:
		f, ok := arg.(func())
		if !ok {
			return fmt.Errorf("wait control: SetNotify wants func(), got %T: %w", arg, fi.EINVAL)
		}
		if o.kind != fi.WaitMutexCond {
			return fmt.Errorf("wait control: SetNotify on %v: %w", o.kind, fi.ENOSYS)
		}
		if f == nil {
			o.notify.Store(nil)
		} else {
			o.notify.Store(&f)
		}
		return nil
	}
	return fmt.Errorf("wait control: %v: %w", cmd, fi.ENOSYS)
}

// Close releases the eventfd and wakes every waiter (FI_EINTR); later Waits
// fail with FI_EINVAL and Signals do nothing. A second Close fails with
// FI_EINVAL.
func (o *Object) Close() error {
	if o.closed.Swap(true) {
		return fmt.Errorf("wait close: %w", fi.EINVAL)
	}
	var err error
	o.fdMu.Lock()
	if o.fd >= 0 {
		err = unix.Close(o.fd)
		o.fd = -1
	}
	o.fdMu.Unlock()
	o.Interrupt()
	if o.kind == fi.WaitMutexCond {
		o.broadcast()
	}
	if err != nil && !errors.Is(err, unix.EBADF) {
		return fmt.Errorf("wait close: %w", fi.ErrnoOf(err))
	}
	return nil
}
