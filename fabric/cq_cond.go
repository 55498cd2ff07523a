package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// CQWaitCond is enum fi_cq_wait_cond: how a blocking read's cond is read.
type CQWaitCond int

// Wait conditions, numbered as in fi_eq.h.
const (
	CQCondNone      CQWaitCond = iota // FI_CQ_COND_NONE: any entry satisfies the wait
	CQCondThreshold                   // FI_CQ_COND_THRESHOLD: cond is the number of entries to wait for
)

// SReadCond is fi_cq_sreadfrom (src nil: fi_cq_sread) with its cond
// argument. On a CQ opened with WaitCond CQCondThreshold the call waits
// until cond entries are queued (cond below 1 counts as 1) and then reads
// up to len(buf) of them; an error completion at the head ends the wait
// at once (FI_EAVAIL), and when the timeout expires or Signal interrupts
// it, whatever is queued is returned (FI_EAGAIN only when nothing is).
// The condition is an optimization, as fi_cq(3) allows: entries that
// arrive as the wait ends may be read with fewer than cond queued. With
// CQCondNone, cond is ignored and SReadCond is SReadFrom.
func (cq *CQ) SReadCond(buf []CQEntry, src []fi.Addr, cond int, timeoutMs int) (int, error) {
	threshold := 1
	if cq.attr.WaitCond == CQCondThreshold && cond > 1 {
		threshold = cond
	}
	return cq.sread(buf, src, threshold, timeoutMs)
}

// readCondLocked reads like readLocked once threshold entries are queued
// or an error entry heads the queue (or the CQ is closed, which
// readLocked reports); before that it answers FI_EAGAIN. cq.mu is held.
func (cq *CQ) readCondLocked(buf []CQEntry, src []fi.Addr, threshold int) (int, error) {
	if !cq.closed && cq.count() < threshold && !cq.errAtHead() {
		return 0, fi.EAGAIN
	}
	return cq.readLocked(buf, src)
}

// readAny is what a blocking read whose wait ended returns: the entries
// queued, whatever the threshold, else FI_EAGAIN.
func (cq *CQ) readAny(buf []CQEntry, src []fi.Addr) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.readLocked(buf, src)
}

// pendingCond is pending for a threshold wait.
func (cq *CQ) pendingCond(threshold int) bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.closed || cq.count() >= threshold || cq.errAtHead()
}

// Strerror is fi_cq_strerror: a printable description of an error
// completion's ProvErrno and ErrData. xdpfab's provider error numbers are
// the libfabric errno of the completion (CQErrEntry.Err); ErrData, when
// there is some, is shown in hex.
func (cq *CQ) Strerror(provErrno int, errData []byte) string {
	s := fi.Errno(provErrno).Error()
	if len(errData) > 0 {
		s = fmt.Sprintf("%s (error data %x)", s, errData)
	}
	return s
}
