package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// CQSink is storage for a CQ's success completions outside the CQ: the C
// provider's ring (provider/cqring.go), which fi_cq_read drains without
// entering Go. While the CQ's own queue is empty, success completions go
// to the sink; an error completion, and every completion after it until
// the CQ's queue is empty again, stays in the CQ. So the sink only ever
// holds completions older than the CQ's own, and a reader that drains the
// sink first and then the CQ reads them in order; the CQ's own queue being
// empty (Held) is what tells such a reader it need not look further.
//
// The CQ calls Push, Len and Held under its lock (one producer at a time);
// Read takes completions and may run at the same time as readers outside
// Go, so implementations claim what they read atomically. The CQ's slot
// reservations count the sink's entries, so Push fails only when the sink
// is smaller than the CQ; the completion then stays in the CQ.
type CQSink interface {
	// Push stores a completion (already reduced to the CQ's format) and
	// its source address; false when the sink is full.
	Push(e *CQEntry, src fi.Addr) bool
	// Len is the number of completions stored and not yet read.
	Len() int
	// Read takes up to len(buf) completions, oldest first, with their
	// sources into src when it is not nil, and returns how many.
	Read(buf []CQEntry, src []fi.Addr) int
	// Held reports how many completions the CQ holds in its own queue
	// now (and whether it is closed): a reader outside Go that finds the
	// sink empty has nothing more to read while that is zero.
	Held(n int, closed bool)
}

// SetSink makes s the store of the CQ's success completions (see
// CQSink). It must be set before anything is queued: FI_EBUSY once the
// CQ has completions, or a sink already.
func (cq *CQ) SetSink(s CQSink) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	switch {
	case cq.closed:
		return fmt.Errorf("cq set sink: closed: %w", fi.EINVAL)
	case cq.sink != nil || cq.n > 0:
		return fmt.Errorf("cq set sink: %w", fi.EBUSY)
	}
	cq.sink = s
	s.Held(0, false)
	return nil
}

// count is the number of completions queued, in the CQ and its sink.
// cq.mu is held.
func (cq *CQ) count() int {
	if cq.sink == nil {
		return cq.n
	}
	return cq.n + cq.sink.Len()
}

// errAtHead reports whether the oldest queued completion is an error.
// cq.mu is held.
func (cq *CQ) errAtHead() bool {
	return cq.n > 0 && cq.ring[cq.head].isErr && (cq.sink == nil || cq.sink.Len() == 0)
}

// held tells the sink how much the CQ's own queue holds. cq.mu is held.
func (cq *CQ) held() {
	if cq.sink != nil {
		cq.sink.Held(cq.n, cq.closed)
	}
}
