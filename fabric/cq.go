package fabric

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// CQFormat is enum fi_cq_format: which fields of a completion are filled.
type CQFormat int

// CQ formats, numbered as in fi_eq.h.
const (
	CQFormatUnspec  CQFormat = iota // FI_CQ_FORMAT_UNSPEC: the provider picks CQFormatData
	CQFormatContext                 // FI_CQ_FORMAT_CONTEXT: op context only
	CQFormatMsg                     // FI_CQ_FORMAT_MSG: + flags, len
	CQFormatData                    // FI_CQ_FORMAT_DATA: + buf, data
	CQFormatTagged                  // FI_CQ_FORMAT_TAGGED: + tag
)

// CQAttr is fi_cq_attr.
type CQAttr struct {
	Size            int // entries; 0 picks DefaultCQSize
	Flags           fi.Flags
	Format          CQFormat
	WaitObj         fi.WaitObj
	SignalingVector int
	WaitCond        CQWaitCond // how SReadCond's cond is read
	WaitSet         *wait.Set  // the set to join with fi.WaitSet
}

// DefaultCQSize is the CQ size used when CQAttr.Size is 0.
const DefaultCQSize = 4096

// CQEntry is one completion: the union of fi_cq_entry, fi_cq_msg_entry,
// fi_cq_data_entry and fi_cq_tagged_entry. Fields beyond the CQ's format
// are left zero.
type CQEntry struct {
	Context any
	Flags   fi.Flags // FI_SEND, FI_RECV, FI_RMA|FI_READ, FI_ATOMIC|FI_WRITE, ...
	Len     int
	Buf     []byte
	Data    uint64
	Tag     uint64
}

// CQErrEntry is fi_cq_err_entry.
type CQErrEntry struct {
	CQEntry
	OLen      int      // overflow length for truncated receives
	Err       fi.Errno // positive libfabric error number
	ProvErrno int
	ErrData   []byte
	Src       fi.Addr // the peer the failed operation was with, when known
}

type cqItem struct {
	isErr bool
	src   fi.Addr
	err   CQErrEntry // CQEntry part used for successes
}

// CQ is a completion queue (fi_cq). Completions and error completions are
// kept in one FIFO: Read answers FI_EAVAIL while the head is an error, like
// libfabric's util CQ, so errors are seen in order.
//
// The queue is bounded by Size; the endpoints posting to it reserve a slot
// for every operation they accept (see reserve), so a completion is never
// dropped for lack of room: an operation that cannot reserve one fails with
// FI_EAGAIN when posted. An endpoint takes its transmit CQ's slots in batches
// while the CQ is at most half full (cq_credits.go); the CQ takes back the
// unused ones before it refuses anything.
type CQ struct {
	fi.FIDBase
	dom  *Domain // that opened it: endpoints of other domains cannot bind it
	attr CQAttr

	mu sync.Mutex
	// Guarded by mu. ring holds the n queued items from head on, wrapping;
	// it starts at initialRing slots and doubles (grow) up to attr.Size, the
	// bound reserve enforces, so opening a CQ does not allocate and zero
	// attr.Size slots (4096 x 144 bytes by default) that a CQ mostly never
	// fills: that made fi_cq_open + fi_close cost 0.4-1.3 ms.
	ring     []cqItem
	head, n  int
	reserved int // slots promised to accepted, not yet completed operations, and endpoints' credits
	// creditEPs, guarded by mu, are the endpoints that took credits
	// (cq_credits.go), for reclaimLocked.
	creditEPs []*Endpoint
	closed    bool
	refs      int // endpoints bound

	progress progressSet // endpoints whose manual progress reads drive

	sink      CQSink  // where success completions go while ring is empty (cq_sink.go); guarded by mu
	sinkEntry CQEntry // guarded by mu: the entry push hands to sink
	// sinkBuf and sinkSrc, guarded by mu, carry what a read takes from
	// sink: a caller's buffer passed through the interface would escape,
	// one allocation per read of a stack buffer.
	sinkBuf [16]CQEntry
	sinkSrc [16]fi.Addr

	// obj is the CQ's own wait object (nil for FI_WAIT_NONE): the one
	// exported for FD, MUTEX_COND, YIELD and UNSPEC, and for FI_WAIT_SET
	// a private one so that SRead waits for this CQ and not for any member
	// of the set. set is the wait set joined with FI_WAIT_SET. Both are
	// signalled after mu is released.
	obj *wait.Object
	set *wait.Set

	// signaled is fi_cq_signal's wake-up, remembered until one blocking
	// read (SRead, or Wait on the CQ's wait set) that finds nothing to
	// read takes it (takeSignal) and returns at once.
	signaled atomic.Bool
}

// CQOpen is fi_cq_open. The domain cannot close while the CQ is open.
func (d *Domain) CQOpen(attr CQAttr, context any) (*CQ, error) {
	if err := d.hold("cq open"); err != nil {
		return nil, err
	}
	cq, err := d.cqOpen(attr, context)
	if err != nil {
		d.release()
	}
	return cq, err
}

func (d *Domain) cqOpen(attr CQAttr, context any) (*CQ, error) {
	if attr.Size < 0 || attr.Size > 1<<22 {
		return nil, fmt.Errorf("cq open: size %d: %w", attr.Size, fi.EINVAL)
	}
	if attr.Size == 0 {
		attr.Size = DefaultCQSize
	}
	if attr.Flags&^fi.AFFINITY != 0 {
		return nil, fmt.Errorf("cq open: flags %#x: %w", uint64(attr.Flags), fi.EBADFLAGS)
	}
	if attr.Format < CQFormatUnspec || attr.Format > CQFormatTagged {
		return nil, fmt.Errorf("cq open: format %d: %w", attr.Format, fi.EINVAL)
	}
	if attr.WaitCond != CQCondNone && attr.WaitCond != CQCondThreshold {
		return nil, fmt.Errorf("cq open: wait_cond %d: %w", attr.WaitCond, fi.EINVAL)
	}
	if attr.Format == CQFormatUnspec {
		attr.Format = CQFormatData
	}
	cq := &CQ{FIDBase: fi.NewFIDBase(fi.ClassCQ, context), dom: d, attr: attr, ring: make([]cqItem, min(attr.Size, initialRing))}
	cq.progress.auto = d.attr.Progress != ProgressManual
	switch attr.WaitObj {
	case fi.WaitNone:
	case fi.WaitSet:
		if attr.WaitSet == nil {
			return nil, fmt.Errorf("cq open: FI_WAIT_SET without a wait set: %w", fi.EINVAL)
		}
		obj, err := wait.NewObject(fi.WaitUnspec)
		if err != nil {
			return nil, fmt.Errorf("cq open: %w", err)
		}
		if err := attr.WaitSet.Add((*cqMember)(cq)); err != nil {
			obj.Close()
			return nil, fmt.Errorf("cq open: %w", err)
		}
		cq.obj, cq.set = obj, attr.WaitSet
	default:
		obj, err := wait.NewObject(attr.WaitObj)
		if err != nil {
			return nil, fmt.Errorf("cq open: %w", err)
		}
		cq.obj = obj
	}
	return cq, nil
}

// cqMember lets a CQ join a wait.Set without exporting Pending.
type cqMember CQ

func (m *cqMember) Pending() bool { return (*CQ)(m).pending() }

// TakeSignal implements wait.SignalTaker: fi_cq_signal on a CQ in a wait
// set also ends one fi_wait on the set.
func (m *cqMember) TakeSignal() bool { return (*CQ)(m).takeSignal() }

// takeSignal consumes a pending fi_cq_signal.
func (cq *CQ) takeSignal() bool {
	return cq.signaled.Load() && cq.signaled.CompareAndSwap(true, false)
}

func (cq *CQ) pending() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.count() > 0 || cq.closed
}

func (cq *CQ) signal() {
	cq.progress.wake()
	if cq.obj != nil {
		cq.obj.Signal()
	}
	if cq.set != nil {
		cq.set.Signal()
	}
}

// Attr returns the CQ's attributes with defaults resolved.
func (cq *CQ) Attr() CQAttr { return cq.attr }

// reserve promises one slot to an operation being accepted; it fails with
// FI_EAGAIN when every slot is taken or promised.
func (cq *CQ) reserve() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return fmt.Errorf("cq closed: %w", fi.EINVAL)
	}
	if cq.count()+cq.reserved >= cq.attr.Size {
		cq.reclaimLocked()
		if cq.count()+cq.reserved >= cq.attr.Size {
			return fi.EAGAIN
		}
	}
	cq.reserved++
	return nil
}

// unreserve returns a slot promised by reserve that will not be used.
func (cq *CQ) unreserve() { cq.unreserveN(1) }

// unreserveN returns n slots promised by reserve or reserveAhead.
func (cq *CQ) unreserveN(n int) {
	cq.mu.Lock()
	cq.reserved -= n
	cq.mu.Unlock()
}

// complete queues a completion into a slot promised by reserve (reserved
// true) or, for completions not tied to a posted operation, any free slot.
func (cq *CQ) complete(e *CQEntry, src fi.Addr, reserved bool) {
	cq.mu.Lock()
	queued := cq.pushDoneLocked(e, src, reserved)
	cq.mu.Unlock()
	if queued {
		cq.signal()
	}
}

// completeErr queues an error completion, like complete.
func (cq *CQ) completeErr(e *CQErrEntry, reserved bool) {
	cq.mu.Lock()
	queued := cq.admitLocked(reserved)
	if queued {
		// fi_cq_err_entry carries every field whatever the format.
		*cq.tailLocked() = cqItem{isErr: true, src: e.Src, err: *e}
	}
	cq.mu.Unlock()
	if queued {
		cq.signal()
	}
}

// doneItem is a successful operation's completion as opBatch gathers it:
// the fields a success fills.
type doneItem struct {
	ctx   any
	src   fi.Addr
	flags fi.Flags
	n     int
}

// pushDone queues completions of successful operations that reserved
// their slots, in order, under one lock and with one wake-up: the
// batched counterpart of complete (complete_batch.go). The items are the
// caller's scratch; they are copied.
func (cq *CQ) pushDone(items []doneItem) {
	queued := false
	cq.mu.Lock()
	for i := range items {
		d := &items[i]
		e := CQEntry{Context: d.ctx, Flags: d.flags, Len: d.n}
		if cq.pushDoneLocked(&e, d.src, true) {
			queued = true
		}
	}
	cq.mu.Unlock()
	if queued {
		cq.signal()
	}
}

// pushDoneLocked queues the success entry e (the caller's scratch;
// filtered in place) and reports whether it was (false: overrun, or the
// CQ closed). It is written straight into its ring slot instead of
// through a whole cqItem built on the stack and copied. cq.mu is held;
// the caller signals after releasing it.
func (cq *CQ) pushDoneLocked(e *CQEntry, src fi.Addr, reserved bool) bool {
	if !cq.admitLocked(reserved) {
		return false
	}
	cq.filter(e)
	if cq.sink != nil && cq.n == 0 {
		// Handed over in the CQ's scratch entry, not e: a pointer
		// through the interface would move it to the heap, one
		// allocation per completion whether a sink is set or not.
		cq.sinkEntry = *e
		ok := cq.sink.Push(&cq.sinkEntry, src)
		cq.sinkEntry = CQEntry{}
		if ok {
			return true
		}
	}
	it := cq.tailLocked()
	it.isErr, it.src = false, src
	it.err = CQErrEntry{CQEntry: *e}
	return true
}

// admitLocked takes a completion's slot: the one reserve promised, or a
// free one. False: closed under an in-flight op, or an unreserved
// completion with no room (libfabric's CQ overrun). An unreserved
// completion never takes a slot promised to an accepted operation.
// cq.mu is held.
func (cq *CQ) admitLocked(reserved bool) bool {
	if reserved {
		cq.reserved--
	} else if len(cq.creditEPs) > 0 && cq.count()+cq.reserved >= cq.attr.Size {
		cq.reclaimLocked()
	}
	return !cq.closed && cq.count() < cq.attr.Size && (reserved || cq.count()+cq.reserved < cq.attr.Size)
}

// tailLocked appends a slot to the ring and returns it, for the caller to
// fill before releasing cq.mu. cq.mu is held.
func (cq *CQ) tailLocked() *cqItem {
	if cq.n == len(cq.ring) {
		cq.grow()
	}
	tail := cq.head + cq.n
	if tail >= len(cq.ring) {
		tail -= len(cq.ring)
	}
	cq.n++
	cq.held()
	return &cq.ring[tail]
}

// initialRing is the ring a CQ starts with; it doubles up to Size as
// completions queue up. An application may open thousands of CQs of the
// default size (fabtests' fi_cq_test opens 32768) that never hold more
// than a few entries: allocating every CQ's full ring at open would take
// gigabytes.
const initialRing = 64

// grow doubles the full ring (at most to Size), keeping the entries in
// order from index 0. cq.mu is held.
func (cq *CQ) grow() {
	ring := make([]cqItem, min(max(2*len(cq.ring), initialRing), cq.attr.Size))
	n := copy(ring, cq.ring[cq.head:])
	copy(ring[n:], cq.ring[:cq.head])
	cq.ring, cq.head = ring, 0
}

// filter clears the fields the CQ's format does not carry.
func (cq *CQ) filter(e *CQEntry) {
	switch cq.attr.Format {
	case CQFormatContext:
		*e = CQEntry{Context: e.Context}
	case CQFormatMsg:
		e.Buf, e.Data, e.Tag = nil, 0, 0
	case CQFormatData:
		e.Tag = 0
	}
}

// Read is fi_cq_read: it moves up to len(buf) completions into buf and
// returns how many. It fails with FI_EAGAIN when none is queued and with
// FI_EAVAIL when the head is an error completion (read it with ReadErr).
func (cq *CQ) Read(buf []CQEntry) (int, error) { return cq.ReadFrom(buf, nil) }

// ReadFrom is fi_cq_readfrom: Read that also reports each completion's
// source address (the sender's fi_addr, or its user ID on an AV with user
// IDs; FI_ADDR_NOTAVAIL when unknown) into src, which must be nil or at
// least as long as buf.
func (cq *CQ) ReadFrom(buf []CQEntry, src []fi.Addr) (int, error) {
	cq.progress.run()
	if src != nil && len(src) < len(buf) {
		return 0, fmt.Errorf("cq readfrom: %d source slots for %d entries: %w", len(src), len(buf), fi.EINVAL)
	}
	cq.mu.Lock()
	n, err := cq.readLocked(buf, src)
	cq.mu.Unlock()
	if err == fi.EAGAIN && cq.progress.poll() > 0 { //nolint:errorlint // readLocked returns it bare
		// Auto progress, nothing queued: the packets this reader polled
		// for itself may have completed something (progressSet.poll).
		cq.mu.Lock()
		n, err = cq.readLocked(buf, src)
		cq.mu.Unlock()
	}
	return n, err
}

func (cq *CQ) readLocked(buf []CQEntry, src []fi.Addr) (int, error) {
	if cq.closed {
		return 0, fmt.Errorf("cq read: closed: %w", fi.EINVAL)
	}
	i := 0
	if cq.sink != nil && len(buf) > 0 {
		i = cq.readSink(buf, src) // older than anything in ring
	}
	if cq.n == 0 {
		if i == 0 {
			return 0, fi.EAGAIN
		}
		return i, nil
	}
	defer cq.held()
	for i < len(buf) && cq.n > 0 {
		it := &cq.ring[cq.head]
		if it.isErr {
			break
		}
		buf[i] = it.err.CQEntry
		if src != nil {
			src[i] = it.src
		}
		*it = cqItem{}
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		i++
	}
	if i == 0 && len(buf) > 0 {
		return 0, fi.EAVAIL
	}
	return i, nil
}

// readSink moves up to len(buf) completions from sink into buf (and their
// sources into src, when not nil) through the CQ's own scratch arrays.
// cq.mu is held.
func (cq *CQ) readSink(buf []CQEntry, src []fi.Addr) int {
	i := 0
	for i < len(buf) {
		k := min(len(buf)-i, len(cq.sinkBuf))
		var srcs []fi.Addr
		if src != nil {
			srcs = cq.sinkSrc[:k]
		}
		n := cq.sink.Read(cq.sinkBuf[:k], srcs)
		copy(buf[i:], cq.sinkBuf[:n])
		if src != nil {
			copy(src[i:], cq.sinkSrc[:n])
		}
		clear(cq.sinkBuf[:n])
		i += n
		if n < k {
			break
		}
	}
	return i
}

// ReadErr is fi_cq_readerr: it takes the head error completion, or fails
// with FI_EAGAIN when the head is not one.
func (cq *CQ) ReadErr(flags fi.Flags) (CQErrEntry, error) {
	if flags != 0 {
		return CQErrEntry{}, fmt.Errorf("cq readerr: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return CQErrEntry{}, fmt.Errorf("cq readerr: closed: %w", fi.EINVAL)
	}
	if !cq.errAtHead() {
		return CQErrEntry{}, fi.EAGAIN
	}
	e := cq.ring[cq.head].err
	cq.ring[cq.head] = cqItem{}
	cq.head++
	if cq.head == len(cq.ring) {
		cq.head = 0
	}
	cq.n--
	cq.held()
	return e, nil
}

// SRead is fi_cq_sread: Read that blocks until at least one completion (or
// an error completion, FI_EAVAIL) is queued, timeoutMs milliseconds pass
// (FI_EAGAIN; negative waits forever), Signal is called (FI_EAGAIN) or the
// CQ is closed. It fails with FI_ENOSYS on a CQ opened with FI_WAIT_NONE;
// a CQ in a wait set waits for its own completions.
//
// A Signal made while no SRead is blocked is remembered, as libfabric's
// CQs do: the next blocking read that finds nothing to read (an SRead with
// a non-zero timeout, or a Wait on the CQ's wait set) returns FI_EAGAIN at
// once and consumes it. One Signal ends one such read; an SRead that finds
// completions returns them and leaves the signal pending.
func (cq *CQ) SRead(buf []CQEntry, timeoutMs int) (int, error) {
	return cq.SReadFrom(buf, nil, timeoutMs)
}

// SReadFrom is fi_cq_sreadfrom: SRead that reports source addresses as
// ReadFrom does.
func (cq *CQ) SReadFrom(buf []CQEntry, src []fi.Addr, timeoutMs int) (int, error) {
	return cq.sread(buf, src, 1, timeoutMs)
}

// sread is SRead waiting until threshold entries are queued (see
// SReadCond), or an error completion heads the queue.
func (cq *CQ) sread(buf []CQEntry, src []fi.Addr, threshold, timeoutMs int) (int, error) {
	if cq.obj == nil {
		return 0, fmt.Errorf("cq sread: no wait object (%v): %w", cq.attr.WaitObj, fi.ENOSYS)
	}
	if src != nil && len(src) < len(buf) {
		return 0, fmt.Errorf("cq sreadfrom: %d source slots for %d entries: %w", len(src), len(buf), fi.EINVAL)
	}
	// done reads the CQ once threshold entries are queued (or an error
	// heads it) and reports whether the wait is over: something was read
	// (or an error), or, short of that, a pending Signal was taken, which
	// ends the wait with whatever is queued (FI_EAGAIN when nothing is). A
	// zero timeout is a plain read and leaves the signal for a read that
	// would block, as libfabric does.
	var n int
	var err error
	done := func() bool {
		cq.mu.Lock()
		defer cq.mu.Unlock()
		n, err = cq.readCondLocked(buf, src, threshold)
		if !errors.Is(err, fi.EAGAIN) {
			return true
		}
		if timeoutMs != 0 && cq.takeSignal() {
			n, err = cq.readLocked(buf, src)
			return true
		}
		return false
	}
	if cq.progress.manual() {
		// Manual progress: nobody else moves packets, so block by driving
		// the bound endpoints until something completes.
		if !cq.progress.spin(timeoutMs, done) {
			return cq.readAny(buf, src)
		}
		return n, err
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	var deadline time.Time
	if timeoutMs >= 0 {
		deadline = time.Now().Add(timeout)
	}
	if timeoutMs != 0 {
		// Auto progress: wait by receiving (see progressSet.beginAssist),
		// so the packet that completes an operation wakes this thread
		// and not the receive goroutine's, which would then wake this
		// one.
		held, waited := cq.progress.assistedWait(deadline, timeoutMs < 0, done)
		switch {
		case held:
			return n, err
		case waited:
			return cq.readAny(buf, src)
		}
	}
	ready := func() bool { return cq.pendingCond(threshold) || cq.signaled.Load() }
	for {
		cq.progress.run()
		if done() {
			return n, err
		}
		if timeoutMs >= 0 {
			timeout = time.Until(deadline)
			if timeout <= 0 {
				return cq.readAny(buf, src)
			}
		}
		if err := cq.obj.Wait(timeout, ready); err != nil {
			if errors.Is(err, fi.ETIMEDOUT) || errors.Is(err, fi.EINTR) {
				return cq.readAny(buf, src)
			}
			return 0, fmt.Errorf("cq sread: %w", err)
		}
	}
}

// Signal is fi_cq_signal: it ends one blocking read of the CQ with
// FI_EAGAIN, the one blocked in SRead now or, if none is, the next one
// (see SRead). It also signals the exported wait object (the eventfd
// becomes readable, the condition is broadcast) or the wait set, like a
// completion, so an application sleeping on those wakes up too.
func (cq *CQ) Signal() error {
	if cq.obj == nil {
		return fmt.Errorf("cq signal: no wait object: %w", fi.ENOSYS)
	}
	cq.mu.Lock()
	closed := cq.closed
	cq.mu.Unlock()
	if closed {
		return fmt.Errorf("cq signal: closed: %w", fi.EINVAL)
	}
	// Published before the wake-ups: a reader that registered as a waiter
	// (wait.Object, progressSet.sleep) before this sees it when woken, one
	// that registers after sees it in its first check.
	cq.signaled.Store(true)
	cq.signal()
	return nil
}

// Control is fi_control on the CQ: wait.GetWait returns the eventfd (into an
// *int) or the mutex/cond pair (into a *wait.MutexCond) to wait on outside
// xdpfab; wait.GetWaitObj returns the kind.
func (cq *CQ) Control(cmd wait.Command, arg any) error {
	switch {
	case cq.set != nil:
		return cq.set.Control(cmd, arg)
	case cq.obj != nil:
		return cq.obj.Control(cmd, arg)
	}
	return fmt.Errorf("cq control: FI_WAIT_NONE: %w", fi.ENODATA)
}

// TryWait is fi_trywait for the CQ: FI_EAGAIN when completions are queued,
// else the wait object is armed so that a poll on it wakes on the next one.
func (cq *CQ) TryWait() error {
	cq.mu.Lock()
	closed := cq.closed
	cq.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("cq trywait: closed: %w", fi.EINVAL)
	case cq.set != nil:
		return cq.set.TryWait()
	case cq.obj == nil:
		return fmt.Errorf("cq trywait: FI_WAIT_NONE: %w", fi.ENOSYS)
	}
	cq.obj.Reset()
	if cq.pending() {
		return fi.EAGAIN
	}
	return nil
}

// Close is fi_close: FI_EBUSY while an endpoint is bound; queued
// completions are discarded.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return fmt.Errorf("cq close: already closed: %w", fi.EINVAL)
	}
	if cq.refs > 0 {
		cq.mu.Unlock()
		return fmt.Errorf("cq close: %d endpoint(s) bound: %w", cq.refs, fi.EBUSY)
	}
	cq.closed = true
	cq.ring, cq.head, cq.n = nil, 0, 0
	cq.held()
	cq.mu.Unlock()
	if cq.obj != nil {
		cq.obj.Close()
	}
	if cq.set != nil {
		// Leaving the set takes its lock, which may call Pending: not
		// under cq.mu.
		cq.set.Remove((*cqMember)(cq))
	}
	// Readers sleeping in SRead's manual progress wake up and see the CQ
	// closed; the set's eventfd goes.
	cq.progress.close()
	cq.dom.release()
	return nil
}

func (cq *CQ) ref() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return fmt.Errorf("cq closed: %w", fi.EINVAL)
	}
	cq.refs++
	return nil
}

func (cq *CQ) unref() {
	cq.mu.Lock()
	cq.refs--
	cq.mu.Unlock()
}
