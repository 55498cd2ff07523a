// Package epoch tells a writer when an object it unlinked from a lock-free
// structure can no longer be in use by a reader, so that the object can be
// filled again (epoch-based reclamation with quiescent states).
//
// A Domain counts epochs. Each reader that reaches objects without locks
// registers a Reader and announces quiescent points: Quiesce says "I hold
// no object I reached before this call" (one atomic load of the domain's
// epoch and one store to the reader's own cache line; the target datapath
// calls it once per poll batch, never per packet); Offline says "I hold
// none and will reach none until my next Quiesce" (before a poller blocks
// waiting for packets, so an idle poller holds nothing back). A writer
// unlinks an object, then stamps it with Retire, which advances the
// epoch; the object is unreachable by every registered reader once Safe
// is at least that stamp, because every reader has then loaded the epoch
// after the unlink, at a point where it held nothing it had reached
// before. A writer may unlink several objects and stamp them all
// with one Retire (mr stamps its closed regions in batches): Retire is a
// sequentially consistent add, so every unlink before it, even a plain
// release store, is visible to a reader that loads the epoch it
// returns; a stamp taken without advancing the epoch (a load of it)
// would not order the writer's unlinking stores before that reader's
// load.
//
// Failure modes: a reader that stops announcing while online (a handler
// blocked in a batch, a manual-progress application that stops calling
// progress) holds Safe where it is for as long as it does: nothing retired
// since becomes reusable, so writers must bound what they keep waiting
// (mr keeps at most a fixed number of retired regions and lets the
// garbage collector have the rest). A reader that reaches objects without
// being registered, or keeps one across Quiesce, defeats the scheme: the
// object may be refilled under it. Memory ordering is Go's sequentially
// consistent atomics; no fences are needed beyond them.
package epoch

import (
	"math"
	"sync"
	"sync/atomic"
)

// offline is a reader's announcement while it holds nothing: above every
// stamp, so it never holds Safe back.
const offline = math.MaxUint64

// Domain is a set of readers and the epoch counter they announce.
type Domain struct {
	epoch   atomic.Uint64
	mu      sync.Mutex                // serializes changes of readers
	readers atomic.Pointer[[]*Reader] // copy on write
}

// Process is the domain of the process's target datapath: every reliable
// engine's receive side registers a Reader with it, and MR tables that
// recycle regions wait for it.
var Process = New()

// New returns an empty domain at epoch 1.
func New() *Domain {
	d := &Domain{}
	d.epoch.Store(1)
	return d
}

// Reader is one lock-free reader of a Domain's objects. Its methods are
// called by one goroutine at a time (a poller, or whoever holds its
// receive lock). A nil *Reader does nothing.
type Reader struct {
	_    [64]byte // own cache line: writers scan it, its owner stores to it
	seen atomic.Uint64
	_    [56]byte
	d    *Domain
}

// NewReader registers a reader, offline until its first Quiesce.
func (d *Domain) NewReader() *Reader {
	r := &Reader{d: d}
	r.seen.Store(offline)
	d.mu.Lock()
	defer d.mu.Unlock()
	var rs []*Reader
	if old := d.readers.Load(); old != nil {
		rs = append(rs, *old...)
	}
	rs = append(rs, r)
	d.readers.Store(&rs)
	return r
}

// Quiesce announces a quiescent point: the reader holds no object it
// reached before this call, and may reach new ones after it.
func (r *Reader) Quiesce() {
	if r != nil {
		r.seen.Store(r.d.epoch.Load())
	}
}

// Offline announces that the reader holds no object and reaches none
// until its next Quiesce.
func (r *Reader) Offline() {
	if r != nil {
		r.seen.Store(offline)
	}
}

// Close unregisters the reader; it must hold no object.
func (r *Reader) Close() {
	if r == nil {
		return
	}
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.readers.Load()
	if old == nil {
		return
	}
	rs := make([]*Reader, 0, len(*old))
	for _, x := range *old {
		if x != r {
			rs = append(rs, x)
		}
	}
	d.readers.Store(&rs)
}

// Retire advances the epoch and returns the stamp of the objects the
// caller has unlinked before the call (no reader can reach them from now
// on by a new load).
func (d *Domain) Retire() uint64 { return d.epoch.Add(1) }

// Safe returns the stamp below or at which retired objects are reachable
// by no registered reader: the least epoch a reader announced, or the
// current epoch when every reader is offline (or there are none).
func (d *Domain) Safe() uint64 {
	safe := d.epoch.Load()
	if rs := d.readers.Load(); rs != nil {
		for _, r := range *rs {
			safe = min(safe, r.seen.Load())
		}
	}
	return safe
}
