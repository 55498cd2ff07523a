// Package eq implements libfabric event queues, fi_eq(3).
//
// An EQ is a bounded FIFO of control events (FI_AV_COMPLETE, FI_MR_COMPLETE,
// connection-management events) and error entries, in one order. Read takes
// the head event; when the head is an error entry Read answers FI_EAVAIL and
// ReadErr takes it, so a caller sees errors exactly where they happened in
// the stream (every error entry of an asynchronous call precedes its
// completion). Objects of other packages report into an EQ with Post and
// PostErr; applications may Write their own events only on an EQ opened with
// FI_WRITE.
//
// The queue holds at most Attr.Size entries. Past that the EQ is overrun,
// as fi_eq(3)'s NOTES say: the entry is not queued, writes fail with
// FI_EOVERRUN, reads drain the events already queued and then report one
// FI_EOVERRUN error entry, and the EQ stays in that fatal state.
//
// An EQ is safe for concurrent use by any number of goroutines.
package eq

import (
	"fmt"
	"sync"

	"github.com/xdpfab/xdpfab/fi"
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
	Flags           fi.Flags // fi.WRITE allows Write; fi.AFFINITY honours SignalingVector
	WaitObj         fi.WaitObj
	SignalingVector int
}

// DefaultSize is the EQ size used when Attr.Size is 0.
const DefaultSize = 1024

// MaxSize is the largest EQ size accepted.
const MaxSize = 1 << 24

// item is one queued entry: an event or an error.
type item struct {
	isErr bool
	ev    Entry
	err   ErrEntry
}

// EQ is an event queue.
type EQ struct {
	fi.FIDBase
	attr Attr

	mu sync.Mutex
	// The fields below are guarded by mu.
	ring    []item // circular buffer of len attr.Size
	head    int    // index of the oldest entry
	n       int    // entries queued
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
	switch attr.WaitObj {
	case fi.WaitNone, fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield:
	default:
		return nil, fmt.Errorf("eq open: wait object %v: %w", attr.WaitObj, fi.EINVAL)
	}
	q := &EQ{
		FIDBase: fi.NewFIDBase(fi.ClassEQ, context),
		attr:    attr,
		ring:    make([]item, attr.Size),
		refs:    map[fi.FID]int{},
	}
	return q, nil
}

// Attr returns the attributes the EQ was opened with (Size resolved).
func (q *EQ) Attr() Attr { return q.attr }

// Close is fi_close: it fails with FI_EBUSY while an object is bound to the
// EQ; otherwise queued events are discarded.
func (q *EQ) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("eq close: %w", fi.EINVAL)
	}
	if len(q.refs) > 0 {
		return fmt.Errorf("eq close: %d object(s) still bound: %w", len(q.refs), fi.EBUSY)
	}
	q.closed = true
	clear(q.ring)
	q.n = 0
	return nil
}

// Ref records that obj (an AV, MR, domain ...) is bound to the EQ, so Close
// fails with FI_EBUSY until Unref. It fails with FI_EINVAL on a closed EQ.
func (q *EQ) Ref(obj fi.FID) error {
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
// FI_EAVAIL when the head entry is an error (read it with ReadErr).
func (q *EQ) Read(flags fi.Flags) (Entry, error) {
	if flags&^fi.PEEK != 0 {
		return Entry{}, fmt.Errorf("eq read: flags %#x: %w", uint64(flags&^fi.PEEK), fi.EBADFLAGS)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return Entry{}, fmt.Errorf("eq read: closed: %w", fi.EINVAL)
	}
	if q.n == 0 {
		if q.overrun {
			return Entry{}, fi.EAVAIL
		}
		return Entry{}, fi.EAGAIN
	}
	it := &q.ring[q.head]
	if it.isErr {
		return Entry{}, fi.EAVAIL
	}
	e := it.ev
	if flags&fi.PEEK == 0 {
		q.pop()
	}
	return e, nil
}

// ReadErr is fi_eq_readerr: it returns and removes the head entry when it
// is an error, and fails with FI_EAGAIN otherwise. Once an overrun EQ has
// been drained it reports an FI_EOVERRUN error entry (repeatedly: the state
// is fatal).
func (q *EQ) ReadErr(flags fi.Flags) (ErrEntry, error) {
	if flags != 0 {
		return ErrEntry{}, fmt.Errorf("eq readerr: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrEntry{}, fmt.Errorf("eq readerr: closed: %w", fi.EINVAL)
	}
	if q.n == 0 {
		if q.overrun {
			return ErrEntry{FID: q, Context: q.Context(), Err: fi.EOVERRUN}, nil
		}
		return ErrEntry{}, fi.EAGAIN
	}
	it := &q.ring[q.head]
	if !it.isErr {
		return ErrEntry{}, fi.EAGAIN
	}
	e := it.err
	q.pop()
	return e, nil
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
	return q.Post(e)
}

// Post queues an event on behalf of a fabric object. It fails with
// FI_EOVERRUN when the EQ is, or thereby becomes, overrun, and with
// FI_EINVAL when it is closed.
func (q *EQ) Post(e Entry) error {
	return q.push(item{ev: e})
}

// PostErr queues an error entry on behalf of a fabric object.
func (q *EQ) PostErr(e ErrEntry) error {
	return q.push(item{isErr: true, err: e})
}

func (q *EQ) push(it item) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("eq: closed: %w", fi.EINVAL)
	}
	if q.overrun || q.n == len(q.ring) {
		q.overrun = true
		return fi.EOVERRUN
	}
	tail := q.head + q.n
	if tail >= len(q.ring) {
		tail -= len(q.ring)
	}
	q.ring[tail] = it
	q.n++
	return nil
}

// pop removes the head entry; q.mu is held and q.n > 0.
func (q *EQ) pop() {
	q.ring[q.head] = item{} // drop references for the GC
	q.head++
	if q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
}
