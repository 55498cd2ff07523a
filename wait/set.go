package wait

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

// Member is an object that reports into a Set: an EQ, CQ or counter opened
// with fi.WaitSet. The member Adds itself to the Set when it is opened,
// calls Set.Signal after each entry it makes readable, and Removes itself
// when it is closed. Members are compared with ==, so a Member must be a
// comparable value, in practice a pointer.
type Member interface {
	// Pending reports whether the member has something for the
	// application: an entry, an error entry, or a fatal (overrun) state.
	// It may take the member's own lock and must not call the Set.
	Pending() bool
}

// SignalTaker is implemented by a Member whose owner has a signal call
// (fi_cq_signal) that must also end a wait on the set: like the owner's
// own blocking read, a Wait on the set that finds nothing pending returns
// nil at once, once per signal, when a member has one pending. TakeSignal
// reports whether one is pending and consumes it; it must not call the
// Set. TryWait does not look at signals: a signal ends a wait, it is not
// an entry to read.
type SignalTaker interface {
	Member
	TakeSignal() bool
}

// Driver is implemented by a Member whose entries come only while the
// application calls in (FI_PROGRESS_MANUAL: a queue whose reads process
// its endpoints' packets). Wait drives such members itself, as reading
// them would, since fi_wait is the application's call in: without it a
// Wait on a set of manual-progress queues would sleep until its timeout
// however much traffic arrived.
type Driver interface {
	Member
	// Drive runs the member's manual progress once without blocking and
	// reports whether it has any (false: its entries come by
	// themselves, and Wait need not wake up for it).
	Drive() bool
}

// TryWaiter is an object fi_trywait accepts: an EQ, CQ, counter or Set.
type TryWaiter interface {
	// TryWait returns nil when it is safe to block on the object's native
	// wait object and FI_EAGAIN when entries are pending.
	TryWait() error
}

// TryWait is fi_trywait: it calls TryWait on each object in turn and
// returns the first failure (FI_EAGAIN when one has entries pending), nil
// when it is safe to block on all of their wait objects. For a queue in a
// wait set, pass the Set only.
func TryWait(objs ...TryWaiter) error {
	for _, o := range objs {
		if o == nil {
			return fmt.Errorf("trywait: nil object: %w", fi.EINVAL)
		}
		if err := o.TryWait(); err != nil {
			return err
		}
	}
	return nil
}

// Attr is fi_wait_attr.
type Attr struct {
	WaitObj fi.WaitObj // fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond or fi.WaitYield
	Flags   fi.Flags   // reserved: must be 0
}

// Set is a wait set (struct fid_wait): one wait object shared by several
// queues, so that one goroutine, or one poll(2) on one fd, waits for all of
// them.
type Set struct {
	fi.FIDBase
	attr Attr
	obj  *Object

	mu sync.Mutex // serializes Add, Remove and Close
	// members is copied on write with mu held and read without locks by
	// Wait and TryWait.
	members atomic.Pointer[[]Member]
	closed  bool // guarded by mu
}

// Open is fi_wait_open: it returns an empty wait set.
func Open(attr Attr, context any) (*Set, error) {
	if attr.Flags != 0 {
		return nil, fmt.Errorf("wait open: flags %#x are reserved: %w", uint64(attr.Flags), fi.EBADFLAGS)
	}
	switch attr.WaitObj {
	case fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield:
	case fi.WaitPollFD:
		return nil, fmt.Errorf("wait open: %v: %w", attr.WaitObj, fi.ENOSYS)
	default:
		return nil, fmt.Errorf("wait open: wait object %v: %w", attr.WaitObj, fi.EINVAL)
	}
	obj, err := NewObject(attr.WaitObj)
	if err != nil {
		return nil, fmt.Errorf("wait open: %w", err)
	}
	s := &Set{FIDBase: fi.NewFIDBase(fi.ClassWait, context), attr: attr, obj: obj}
	s.members.Store(&[]Member{})
	return s, nil
}

// Attr returns the attributes the set was opened with.
func (s *Set) Attr() Attr { return s.attr }

// Add attaches m to the set (a queue opened with this wait set calls it).
// It fails with FI_EINVAL for a nil member or a closed set and with
// FI_EALREADY when m is already a member.
func (s *Set) Add(m Member) error {
	if m == nil {
		return fmt.Errorf("wait add: nil member: %w", fi.EINVAL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("wait add: closed: %w", fi.EINVAL)
	}
	cur := *s.members.Load()
	if slices.Contains(cur, m) {
		return fmt.Errorf("wait add: already a member: %w", fi.EALREADY)
	}
	next := append(slices.Clip(cur), m)
	s.members.Store(&next)
	return nil
}

// Remove detaches m (its owner calls it when closing). It fails with
// FI_ENOENT when m is not a member.
func (s *Set) Remove(m Member) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.members.Load()
	i := slices.Index(cur, m)
	if i < 0 {
		return fmt.Errorf("wait remove: not a member: %w", fi.ENOENT)
	}
	next := slices.Delete(slices.Clone(cur), i, i+1)
	s.members.Store(&next)
	return nil
}

// Signal is called by a member after it made an entry readable, without
// holding its own lock.
func (s *Set) Signal() { s.obj.Signal() }

// pending reports whether any member has something pending.
func (s *Set) pending() bool {
	for _, m := range *s.members.Load() {
		if m.Pending() {
			return true
		}
	}
	return false
}

// takeSignal consumes one member's pending signal (see SignalTaker).
func (s *Set) takeSignal() bool {
	for _, m := range *s.members.Load() {
		if st, ok := m.(SignalTaker); ok && st.TakeSignal() {
			return true
		}
	}
	return false
}

// ready is Wait's condition: an entry pending, or else a member's signal
// to take.
func (s *Set) ready() bool { return s.pending() || s.takeSignal() }

// Wait is fi_wait: it blocks until a member has something pending and then
// returns nil (at once if one already has), or until a member is signalled
// (fi_cq_signal: see SignalTaker), which also returns nil, as libfabric's
// wait sets do. A negative timeout (in milliseconds) waits forever; on
// expiry it returns FI_ETIMEDOUT. Close from another goroutine makes it
// return FI_EINVAL.
func (s *Set) Wait(timeout int) error {
	d := time.Duration(-1)
	if timeout >= 0 {
		d = time.Duration(timeout) * time.Millisecond
	}
	ready := s.ready
	if timeout == 0 { // a poll, not a blocking wait: signals stay pending
		ready = s.pending
	}
	var err error
	if s.drive() {
		err = s.waitDriving(d, ready)
	} else {
		err = s.obj.Wait(d, ready)
	}
	switch {
	case err == nil:
		return nil
	case err == fi.ETIMEDOUT:
		return fmt.Errorf("wait: %d ms: %w", timeout, fi.ETIMEDOUT)
	case err == fi.EINTR && s.obj.closed.Load():
		return fmt.Errorf("wait: set closed: %w", fi.EINVAL)
	}
	return fmt.Errorf("wait: %w", err)
}

// driveSpin is how long Wait keeps driving manual-progress members
// without sleeping, and driveSlice how long it then sleeps between drives:
// a reply within driveSpin is seen at once, a later one within
// driveSlice, and an idle Wait wakes up 1000 times a second at most.
const (
	driveSpin  = 100 * time.Microsecond
	driveSlice = time.Millisecond
)

// drive runs the manual progress of the members that have some (Driver)
// and reports whether any had.
func (s *Set) drive() bool {
	some := false
	for _, m := range *s.members.Load() {
		if d, ok := m.(Driver); ok && d.Drive() {
			some = true
		}
	}
	return some
}

// waitDriving is Wait for a set with manual-progress members: it drives
// them between checks, spinning for driveSpin and then sleeping on the
// wait object in driveSlice steps (a member made ready by another
// goroutine still wakes it at once).
func (s *Set) waitDriving(d time.Duration, ready func() bool) error {
	start := time.Now()
	for {
		if ready() {
			return nil
		}
		left := time.Duration(-1)
		if d >= 0 {
			if left = d - time.Since(start); left <= 0 {
				return fi.ETIMEDOUT
			}
		}
		if time.Since(start) < driveSpin {
			runtime.Gosched()
		} else {
			step := driveSlice
			if left >= 0 && left < step {
				step = left
			}
			if err := s.obj.Wait(step, ready); err != fi.ETIMEDOUT {
				return err
			}
		}
		s.drive()
	}
}

// TryWait is fi_trywait on the set: it re-arms the set's wait object and
// then returns FI_EAGAIN if any member has something pending, nil if it is
// safe to block on the object retrieved with FI_GETWAIT.
func (s *Set) TryWait() error {
	if s.obj.closed.Load() {
		return fmt.Errorf("wait trywait: closed: %w", fi.EINVAL)
	}
	s.obj.Reset()
	if s.pending() {
		return fi.EAGAIN
	}
	return nil
}

// Control is fi_control on the set: FI_GETWAIT (arg *int for fi.WaitFD,
// *MutexCond for fi.WaitMutexCond; FI_ENODATA for the other kinds) and
// FI_GETWAITOBJ (arg *fi.WaitObj).
func (s *Set) Control(cmd Command, arg any) error { return s.obj.Control(cmd, arg) }

// Close is fi_close: it fails with FI_EBUSY while a member is attached;
// otherwise it releases the wait object and wakes goroutines in Wait.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("wait close: %w", fi.EINVAL)
	}
	if n := len(*s.members.Load()); n > 0 {
		return fmt.Errorf("wait close: %d member(s) still attached: %w", n, fi.EBUSY)
	}
	s.closed = true
	return s.obj.Close()
}
