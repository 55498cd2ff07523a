// Package eq implements libfabric event queues, fi_eq(3).
//
// An EQ is a bounded FIFO of control events (FI_AV_COMPLETE, FI_MR_COMPLETE,
// FI_JOIN_COMPLETE), connection-management events (FI_CONNREQ,
// FI_CONNECTED, FI_SHUTDOWN, with their connection data) and error entries,
// in one order. Objects of other packages report into an EQ with Post and
// PostErr; applications may Write their own events only on an EQ opened with
// FI_WRITE. Read takes the head event; SRead blocks for one; ReadErr takes
// the head error entry.
//
// # Errors in the stream
//
// fi_eq(3) speaks of a "temporary error queue". Here, as in libfabric's
// util EQ, error entries stay in the one FIFO: Read answers FI_EAVAIL when
// the head entry is an error and ReadErr takes it, so a caller sees errors
// exactly where they happened in the stream (every error entry of an
// asynchronous call precedes that call's completion). ReadErr answers
// FI_EAGAIN when the head is not an error, including when nothing is queued.
//
// # Overrun
//
// The queue holds at most Attr.Size entries (events and errors together).
// Past that the EQ is overrun, as fi_eq(3)'s NOTES say: the entry is not
// queued, that and every later write fails with FI_EOVERRUN, reads drain the
// events already queued and then Read answers FI_EAVAIL and ReadErr reports
// an FI_EOVERRUN error entry (repeatedly: the state is fatal).
//
// # Waiting
//
// Attr.WaitObj picks how SRead blocks and what Control(FI_GETWAIT) hands
// out; package wait implements the objects: FI_WAIT_FD gives an eventfd for
// poll(2)/epoll(7), FI_WAIT_MUTEX_COND a wait.MutexCond (a *sync.Mutex and a
// *sync.Cond on it), FI_WAIT_YIELD spins, FI_WAIT_UNSPEC blocks on a Go
// channel and has nothing to hand out, FI_WAIT_SET signals Attr.WaitSet.
// Whatever the kind, a goroutine blocked in SRead is woken through a channel
// within microseconds of the event. Before blocking on a native object an
// application calls TryWait (fi_trywait): it re-arms the object and answers
// FI_EAGAIN while entries are pending. Reads never clear the native object,
// so an SRead or Read with FI_PEEK cannot lose a wake-up.
//
// # Provider choices
//
//   - Write without FI_WRITE, SRead and TryWait on an EQ opened with
//     FI_WAIT_NONE, and SRead on one opened with FI_WAIT_SET fail with
//     FI_ENOSYS, as libfabric's util EQ does.
//   - SRead returns FI_EAGAIN on timeout and when Interrupt is called
//     ("signaled by some external source"), and the closed-EQ error
//     (FI_EINVAL) when another goroutine closes the EQ.
//   - FI_GETWAIT fails with FI_ENODATA when there is no native object
//     (FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_YIELD); for FI_WAIT_SET it
//     returns the set's object.
//   - FI_AFFINITY is accepted with a SignalingVector in 0..NumCPU-1 (else
//     FI_EINVAL) and then ignored: no interrupts are involved.
//   - Write and Post copy CMData and ErrData, so the caller may reuse its
//     buffers; the slices returned by Read and ReadErr belong to the caller
//     (those of an entry read with FI_PEEK are shared with the queue until
//     it is consumed).
//   - ProvErrno is an errno value (Linux or libfabric); Strerror renders it
//     and the error data.
//
// Memory for the queue grows on demand up to Attr.Size, so a large EQ costs
// only what it holds; once warm, Write, Post and Read do not allocate.
//
// An EQ is safe for concurrent use by any number of goroutines.
package eq

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/bits"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// Event is the kind of an EQ event, numbered as in fi_eq.h.
type Event uint32

// Event kinds.
const (
	Notify       Event = iota // FI_NOTIFY
	ConnReq                   // FI_CONNREQ
	Connected                 // FI_CONNECTED
	Shutdown                  // FI_SHUTDOWN
	MRComplete                // FI_MR_COMPLETE
	AVComplete                // FI_AV_COMPLETE
	JoinComplete              // FI_JOIN_COMPLETE
)

var eventNames = [...]string{"FI_NOTIFY", "FI_CONNREQ", "FI_CONNECTED", "FI_SHUTDOWN",
	"FI_MR_COMPLETE", "FI_AV_COMPLETE", "FI_JOIN_COMPLETE"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("Event(%d)", uint32(e))
}

// Entry is one event: fi_eq_entry for control completions, fi_eq_cm_entry
// for connection-management events.
type Entry struct {
	Event   Event
	FID     fi.FID // the object the event is about (the AV, the MR, the endpoint)
	Context any    // the operation's context (or the object's)
	Data    uint64 // event data, e.g. the number of addresses inserted
	CMData  []byte // connection data of FI_CONNREQ / FI_CONNECTED / FI_SHUTDOWN
	Info    any    // FI_CONNREQ: information about the requesting peer
}

// ErrEntry is fi_eq_err_entry.
type ErrEntry struct {
	FID       fi.FID
	Context   any
	Data      uint64   // e.g. the index of the address that failed
	Err       fi.Errno // positive libfabric error number
	ProvErrno int      // provider-specific error number
	ErrData   []byte   // provider-specific error data
}

// Attr is fi_eq_attr.
type Attr struct {
	Size            int      // minimum number of entries; 0 picks DefaultSize
	Flags           fi.Flags // fi.WRITE allows Write; fi.AFFINITY makes SignalingVector valid
	WaitObj         fi.WaitObj
	SignalingVector int       // with fi.AFFINITY: a CPU number, a hint (ignored)
	WaitSet         *wait.Set // with WaitObj fi.WaitSet: the set to signal; ignored otherwise
}

// DefaultSize is the EQ size used when Attr.Size is 0.
const DefaultSize = 1024

// MaxSize is the largest EQ size accepted.
const MaxSize = 1 << 24

// initialRing is the ring capacity an EQ starts with (or its size, if
// smaller); the ring doubles while it is full and below the EQ size.
const initialRing = 64

// slot is one queued entry. An error entry keeps FID, Context and Data in
// the Entry fields, its ErrData in CMData, and has err != 0.
type slot struct {
	Entry
	err       fi.Errno
	provErrno int
}

// copyFrom and copyTo move an entry field by field: whole-struct copies
// use overlapping 16-byte moves that defeat store-to-load forwarding when a
// Read follows the Write at once, which costs more than the copy itself.
func (s *slot) copyFrom(e *Entry) {
	s.Event = e.Event
	s.FID = e.FID
	s.Context = e.Context
	s.Data = e.Data
	s.CMData = e.CMData
	s.Info = e.Info
}

func (s *slot) copyTo(e *Entry) {
	e.Event = s.Event
	e.FID = s.FID
	e.Context = s.Context
	e.Data = s.Data
	e.CMData = s.CMData
	e.Info = s.Info
}

// clear drops the slot's references for the GC.
func (s *slot) clear() {
	s.FID = nil
	s.Context = nil
	s.CMData = nil
	s.Info = nil
}

// EQ is an event queue.
type EQ struct {
	fi.FIDBase
	attr Attr
	size uint64       // attr.Size: the most entries queued at once
	obj  *wait.Object // the EQ's own wait object; nil for FI_WAIT_NONE and FI_WAIT_SET
	set  *wait.Set    // FI_WAIT_SET only

	mu sync.Mutex
	// The fields below are guarded by mu.
	ring    []slot // circular buffer, power-of-two length <= next power of two of size
	mask    uint64 // len(ring)-1
	head    uint64 // sequence number of the oldest entry
	tail    uint64 // sequence number of the next entry written; tail-head are queued
	overrun bool   // size exceeded: fatal, see package doc
	closed  bool
	refs    map[fi.FID]int // objects bound to the EQ (FI_EBUSY on Close)
}

// Open is fi_eq_open: it returns an empty EQ with the given attributes.
func Open(attr Attr, context any) (*EQ, error) {
	if attr.Size < 0 || attr.Size > MaxSize {
		return nil, fmt.Errorf("eq open: size %d outside 0..%d: %w", attr.Size, MaxSize, fi.EINVAL)
	}
	if attr.Size == 0 {
		attr.Size = DefaultSize
	}
	if attr.Flags&^(fi.WRITE|fi.AFFINITY) != 0 {
		return nil, fmt.Errorf("eq open: flags %#x: %w", uint64(attr.Flags&^(fi.WRITE|fi.AFFINITY)), fi.EBADFLAGS)
	}
	if attr.Flags&fi.AFFINITY != 0 && (attr.SignalingVector < 0 || attr.SignalingVector >= runtime.NumCPU()) {
		return nil, fmt.Errorf("eq open: signaling vector %d outside 0..%d: %w", attr.SignalingVector, runtime.NumCPU()-1, fi.EINVAL)
	}
	q := &EQ{
		FIDBase: fi.NewFIDBase(fi.ClassEQ, context),
		attr:    attr,
		size:    uint64(attr.Size),
		refs:    map[fi.FID]int{},
	}
	n := min(ceilPow2(attr.Size), initialRing)
	q.ring = make([]slot, n)
	q.mask = uint64(n - 1)

	switch attr.WaitObj {
	case fi.WaitNone:
	case fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield:
		obj, err := wait.NewObject(attr.WaitObj)
		if err != nil {
			return nil, fmt.Errorf("eq open: %w", err)
		}
		q.obj = obj
	case fi.WaitSet:
		if attr.WaitSet == nil {
			return nil, fmt.Errorf("eq open: FI_WAIT_SET without a wait set: %w", fi.EINVAL)
		}
		if err := attr.WaitSet.Add((*setMember)(q)); err != nil {
			return nil, fmt.Errorf("eq open: %w", err)
		}
		q.set = attr.WaitSet
	default:
		return nil, fmt.Errorf("eq open: wait object %v: %w", attr.WaitObj, fi.EINVAL)
	}
	if attr.WaitObj != fi.WaitSet {
		q.attr.WaitSet = nil
	}
	return q, nil
}

// ceilPow2 returns the smallest power of two >= n (n >= 1).
func ceilPow2(n int) int { return 1 << bits.Len(uint(n-1)) }

// Attr returns the attributes the EQ was opened with (Size resolved).
func (q *EQ) Attr() Attr { return q.attr }

// Close is fi_close: it fails with FI_EBUSY while an object is bound to the
// EQ; otherwise queued events are discarded, the EQ leaves its wait set,
// its wait object is released and goroutines blocked in SRead return.
func (q *EQ) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return fmt.Errorf("eq close: %w", fi.EINVAL)
	}
	if len(q.refs) > 0 {
		n := len(q.refs)
		q.mu.Unlock()
		return fmt.Errorf("eq close: %d object(s) still bound: %w", n, fi.EBUSY)
	}
	q.closed = true
	q.ring = nil
	q.head, q.tail = 0, 0
	q.mu.Unlock()

	// Outside mu: the set and the object take locks ordered before ours.
	if q.set != nil {
		if err := q.set.Remove((*setMember)(q)); err != nil {
			return fmt.Errorf("eq close: %w", err)
		}
	}
	if q.obj != nil {
		if err := q.obj.Close(); err != nil {
			return fmt.Errorf("eq close: %w", err)
		}
	}
	return nil
}

// Ref records that obj (an AV, MR, domain ...) is bound to the EQ, so Close
// fails with FI_EBUSY until Unref. It fails with FI_EINVAL for a nil obj
// or a closed EQ.
func (q *EQ) Ref(obj fi.FID) error {
	if obj == nil {
		return fmt.Errorf("eq bind: nil object: %w", fi.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("eq bind: closed: %w", fi.EINVAL)
	}
	q.refs[obj]++
	return nil
}

// Unref undoes one Ref of obj.
func (q *EQ) Unref(obj fi.FID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.refs[obj] <= 1 {
		delete(q.refs, obj)
	} else {
		q.refs[obj]--
	}
}

// Read is fi_eq_read: it returns the head event, removing it unless flags
// has fi.PEEK. It fails with FI_EAGAIN when the queue is empty and with
// FI_EAVAIL when the head entry is an error (read it with ReadErr) or the
// drained EQ is overrun.
func (q *EQ) Read(flags fi.Flags) (e Entry, err error) {
	if flags&^fi.PEEK != 0 {
		return Entry{}, fmt.Errorf("eq read: flags %#x: %w", uint64(flags&^fi.PEEK), fi.EBADFLAGS)
	}
	q.mu.Lock()
	if q.head == q.tail || q.closed {
		err = q.emptyErrLocked()
		q.mu.Unlock()
		return Entry{}, err
	}
	s := &q.ring[q.head&q.mask]
	if s.err != 0 {
		q.mu.Unlock()
		return Entry{}, fi.EAVAIL
	}
	s.copyTo(&e)
	if flags&fi.PEEK == 0 {
		s.clear()
		q.head++
	}
	q.mu.Unlock()
	return e, nil
}

// emptyErrLocked is Read's answer when nothing is queued or the EQ is
// closed; mu is held.
func (q *EQ) emptyErrLocked() error {
	switch {
	case q.closed:
		return errClosedRead
	case q.overrun:
		return fi.EAVAIL
	}
	return fi.EAGAIN
}

var errClosedRead = fmt.Errorf("eq read: closed: %w", fi.EINVAL)

// ReadErr is fi_eq_readerr: it returns and removes the head entry when it
// is an error, and fails with FI_EAGAIN otherwise. With fi.PEEK, as
// libfabric's util EQ accepts, the entry stays queued. Once an overrun EQ
// has been drained it reports an FI_EOVERRUN error entry (repeatedly: the
// state is fatal).
func (q *EQ) ReadErr(flags fi.Flags) (ErrEntry, error) {
	if flags&^fi.PEEK != 0 {
		return ErrEntry{}, fmt.Errorf("eq readerr: flags %#x: %w", uint64(flags&^fi.PEEK), fi.EBADFLAGS)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrEntry{}, fmt.Errorf("eq readerr: closed: %w", fi.EINVAL)
	}
	if q.head == q.tail {
		if q.overrun {
			return ErrEntry{FID: q, Context: q.Context(), Err: fi.EOVERRUN}, nil
		}
		return ErrEntry{}, fi.EAGAIN
	}
	s := &q.ring[q.head&q.mask]
	if s.err == 0 {
		return ErrEntry{}, fi.EAGAIN
	}
	e := ErrEntry{FID: s.FID, Context: s.Context, Data: s.Data, Err: s.err, ProvErrno: s.provErrno, ErrData: s.CMData}
	if flags&fi.PEEK == 0 {
		*s = slot{}
		q.head++
	}
	return e, nil
}

// SRead is fi_eq_sread: Read that blocks until an entry is readable or
// timeout milliseconds have passed (negative: no limit). It returns
// FI_EAGAIN when the time expires or Interrupt is called with nothing to
// read, FI_EAVAIL as Read does, the closed-EQ error (FI_EINVAL) when another
// goroutine closes the EQ, and FI_ENOSYS on an EQ opened with FI_WAIT_NONE
// or FI_WAIT_SET (fi_eq(3): invalid there).
func (q *EQ) SRead(timeout int, flags fi.Flags) (Entry, error) {
	if flags&^fi.PEEK != 0 {
		return Entry{}, fmt.Errorf("eq sread: flags %#x: %w", uint64(flags&^fi.PEEK), fi.EBADFLAGS)
	}
	if q.obj == nil {
		return Entry{}, fmt.Errorf("eq sread: EQ opened with %v: %w", q.attr.WaitObj, fi.ENOSYS)
	}
	// The common case, an entry already queued, costs one Read.
	if e, err := q.Read(flags); err != fi.EAGAIN {
		return e, err
	}
	d := time.Duration(-1)
	var deadline time.Time
	if timeout >= 0 {
		d = time.Duration(timeout) * time.Millisecond
		deadline = time.Now().Add(d)
	}
	for {
		werr := q.obj.Wait(d, q.readable)
		e, err := q.Read(flags)
		if err != fi.EAGAIN || werr != nil {
			// An entry, an error, or nothing after a timeout or
			// an interrupt (FI_EAGAIN).
			return e, err
		}
		// Woken, but another reader took the entry first.
		if timeout >= 0 {
			if d = time.Until(deadline); d <= 0 {
				return Entry{}, fi.EAGAIN
			}
		}
	}
}

// readable reports whether Read would return at once: an entry is queued,
// or the EQ is overrun or closed.
func (q *EQ) readable() bool {
	q.mu.Lock()
	r := q.head != q.tail || q.overrun || q.closed
	q.mu.Unlock()
	return r
}

// pending reports whether the EQ holds something for the application.
func (q *EQ) pending() bool {
	q.mu.Lock()
	p := !q.closed && (q.head != q.tail || q.overrun)
	q.mu.Unlock()
	return p
}

// setMember is how an EQ joins a wait.Set without exporting Pending.
type setMember EQ

var (
	_ wait.Member    = (*setMember)(nil)
	_ wait.TryWaiter = (*EQ)(nil)
	_ fi.FID         = (*EQ)(nil)
)

// Pending implements wait.Member.
func (m *setMember) Pending() bool { return (*EQ)(m).pending() }

// Interrupt wakes every goroutine blocked in SRead; those with nothing to
// read return FI_EAGAIN (fi_eq(3): "signaled by some external source"). It
// does nothing on an EQ opened with FI_WAIT_NONE or FI_WAIT_SET.
func (q *EQ) Interrupt() {
	if q.obj != nil {
		q.obj.Interrupt()
	}
}

// TryWait is fi_trywait for one EQ: it re-arms the EQ's wait object and
// then returns FI_EAGAIN if entries are pending (read them and call again),
// nil if it is safe to block on the object from Control(FI_GETWAIT): the
// next event will signal it. For an EQ in a wait set it is the set's
// TryWait. It fails with FI_ENOSYS on an EQ opened with FI_WAIT_NONE.
func (q *EQ) TryWait() error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	switch {
	case closed:
		// Checked first: a closed EQ answers for itself, not for the wait
		// set it was in (nil there meant "safe to block" on a dead EQ).
		return fmt.Errorf("eq trywait: closed: %w", fi.EINVAL)
	case q.set != nil:
		return q.set.TryWait()
	case q.obj == nil:
		return fmt.Errorf("eq trywait: EQ opened with %v: %w", q.attr.WaitObj, fi.ENOSYS)
	}
	q.obj.Reset()
	q.mu.Lock()
	closed, pending := q.closed, q.head != q.tail || q.overrun
	q.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("eq trywait: closed: %w", fi.EINVAL)
	case pending:
		return fi.EAGAIN
	}
	return nil
}

// Control is fi_control. wait.GetWait (FI_GETWAIT) stores the native wait
// object: the eventfd into an *int for FI_WAIT_FD, the mutex and condition
// variable into a *wait.MutexCond for FI_WAIT_MUTEX_COND, the set's object
// for FI_WAIT_SET; it fails with FI_ENODATA for the other kinds.
// wait.GetWaitObj (FI_GETWAITOBJ) stores the kind into a *fi.WaitObj. A
// wrong arg type fails with FI_EINVAL, another command with FI_ENOSYS.
func (q *EQ) Control(cmd wait.Command, arg any) error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return fmt.Errorf("eq control: closed: %w", fi.EINVAL)
	}
	if cmd == wait.GetWaitObj {
		p, ok := arg.(*fi.WaitObj)
		if !ok || p == nil {
			return fmt.Errorf("eq control: FI_GETWAITOBJ wants *fi.WaitObj, got %T: %w", arg, fi.EINVAL)
		}
		*p = q.attr.WaitObj
		return nil
	}
	var err error
	switch {
	case q.obj != nil:
		err = q.obj.Control(cmd, arg)
	case q.set != nil:
		err = q.set.Control(cmd, arg)
	case cmd == wait.GetWait:
		err = fmt.Errorf("%v has no wait object: %w", q.attr.WaitObj, fi.ENODATA)
	default:
		err = fmt.Errorf("%v: %w", cmd, fi.ENOSYS)
	}
	if err != nil {
		return fmt.Errorf("eq control: %w", err)
	}
	return nil
}

// Write is fi_eq_write: an application inserts an event. It needs an EQ
// opened with fi.WRITE (else FI_ENOSYS, as a provider without write support
// answers) and fails with FI_EOVERRUN once the EQ is overrun.
func (q *EQ) Write(e Entry, flags fi.Flags) error {
	if q.attr.Flags&fi.WRITE == 0 {
		return fmt.Errorf("eq write: EQ not opened with FI_WRITE: %w", fi.ENOSYS)
	}
	if flags != 0 {
		return fmt.Errorf("eq write: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	return q.push(&e, 0, 0)
}

// Post queues an event on behalf of a fabric object. It fails with
// FI_EOVERRUN when the EQ is, or thereby becomes, overrun, and with
// FI_EINVAL when it is closed.
func (q *EQ) Post(e Entry) error {
	return q.push(&e, 0, 0)
}

// PostErr queues an error entry on behalf of a fabric object. Err must be a
// positive error number (else FI_EINVAL); otherwise it fails as Post does.
func (q *EQ) PostErr(e ErrEntry) error {
	if e.Err <= 0 {
		return fmt.Errorf("eq: error entry with error number %d: %w", int(e.Err), fi.EINVAL)
	}
	return q.push(&Entry{FID: e.FID, Context: e.Context, Data: e.Data, CMData: e.ErrData}, e.Err, e.ProvErrno)
}

// push queues e (an error entry when errno != 0) and signals waiters.
func (q *EQ) push(e *Entry, errno fi.Errno, provErrno int) error {
	if len(e.CMData) > 0 {
		e.CMData = bytes.Clone(e.CMData)
	}
	q.mu.Lock()
	n := q.tail - q.head
	if q.closed || q.overrun || n == q.size {
		err := q.pushErrLocked()
		q.mu.Unlock()
		return err
	}
	if n == uint64(len(q.ring)) {
		q.growLocked()
	}
	s := &q.ring[q.tail&q.mask]
	s.copyFrom(e)
	s.err = errno
	s.provErrno = provErrno
	q.tail++
	q.mu.Unlock()

	if q.obj != nil {
		q.obj.Signal()
	} else if q.set != nil {
		q.set.Signal()
	}
	return nil
}

// pushErrLocked is push's answer when the entry cannot be queued; mu is
// held. Hitting the size limit makes the EQ overrun.
func (q *EQ) pushErrLocked() error {
	if q.closed {
		return errClosedWrite
	}
	q.overrun = true
	return fi.EOVERRUN
}

var errClosedWrite = fmt.Errorf("eq: closed: %w", fi.EINVAL)

// growLocked doubles the full ring, keeping the order; mu is held and
// len(ring) < size.
func (q *EQ) growLocked() {
	next := make([]slot, 2*len(q.ring))
	n := copy(next, q.ring[q.head&q.mask:])
	copy(next[n:], q.ring[:q.head&q.mask])
	q.tail -= q.head
	q.head = 0
	q.ring = next
	q.mask = uint64(len(next) - 1)
}

// Strerror is fi_eq_strerror: a printable form of an error entry's
// provider-specific information. ProvErrno is an errno value, rendered as
// fi_strerror does; ErrData, when present, follows as text if it is
// printable UTF-8 and in hex otherwise.
func (q *EQ) Strerror(provErrno int, errData []byte) string {
	s := fi.Strerror(provErrno)
	if len(errData) == 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s)
	b.WriteString(": ")
	if utf8.Valid(errData) && printable(errData) {
		b.Write(errData)
	} else {
		b.WriteString("0x")
		b.WriteString(hex.EncodeToString(errData))
	}
	return b.String()
}

func printable(b []byte) bool {
	for _, r := range string(b) {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
