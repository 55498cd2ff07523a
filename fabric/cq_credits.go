package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// CQ slots reserved ahead. Every operation an endpoint accepts holds a
// slot of its CQ (CQ.reserve), so that its completion is never dropped;
// taken one at a time that is the CQ's lock per post, beside the
// endpoint's lock (the op slot) and the engine's (Submit): at 64
// fetch-adds in flight a mutex pair is 40 ns of the ~300 ns of user time
// an operation costs on this class of VM (docs/performance-history.md).
//
// So an endpoint takes its transmit CQ's slots in batches of up to
// creditBatch, keeps the unused ones (credits) under its own lock, which
// begin holds anyway to take the op slot, and hands one to each
// operation it accepts. A batch is granted only while the CQ stays at
// most half full, counting what it queues and what is promised after the
// grant, and never by a CQ smaller than creditMinCQ: near its bound a CQ
// reserves one slot at a time, as before. Credits count as promised in
// the CQ. When the CQ would refuse a reservation or an unreserved
// completion for lack of room, it first takes back what the endpoints
// hold unused (reclaimLocked), so a CQ is full when its queued entries and
// the slots of accepted operations fill it, as without credits. Reclaim
// runs under the CQ's lock, whose holders may hold an endpoint's lock
// (holdCQData) and wait for the CQ's: it only TryLocks the endpoint, and
// an endpoint whose lock is busy keeps its credits for that attempt (at
// most creditBatch-1 slots), the caller seeing FI_EAGAIN, which asks it
// to retry. An endpoint gives its credits back when it closes
// (returnCredits), before it unbinds; a CQ cannot close while bound.

const (
	creditBatch = 16 // slots a transmit post takes at most at once
	creditMinCQ = 64 // smaller CQs reserve one slot at a time
)

// reserveAhead promises a slot to an operation ep is accepting and, while
// the CQ is far from full, up to max-1 more for ep's next ones. It returns
// how many it promised, or FI_EAGAIN (full) or FI_EINVAL (closed) as
// reserve does.
func (cq *CQ) reserveAhead(ep *Endpoint, max int) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0, fmt.Errorf("cq closed: %w", fi.EINVAL)
	}
	free := cq.attr.Size - cq.count() - cq.reserved
	if free <= 0 {
		cq.reclaimLocked()
		if free = cq.attr.Size - cq.count() - cq.reserved; free <= 0 {
			return 0, fi.EAGAIN
		}
	}
	k := 1
	if cq.attr.Size >= creditMinCQ && !ep.creditsReturned {
		if spare := free - cq.attr.Size/2; spare > 1 {
			k = min(max, spare)
		}
	}
	if k > 1 && !ep.creditsListed {
		ep.creditsListed = true
		cq.creditEPs = append(cq.creditEPs, ep)
	}
	cq.reserved += k
	return k, nil
}

// reclaimLocked takes back the credits of the endpoints holding some whose
// lock is free now. cq.mu is held.
func (cq *CQ) reclaimLocked() {
	for _, ep := range cq.creditEPs {
		if ep.mu.TryLock() {
			cq.reserved -= ep.txCredits
			ep.txCredits = 0
			ep.mu.Unlock()
		}
	}
}

// reserveTx promises cq's slot to an operation ep is accepting, taking
// credits for the next ones when cq grants more than one. ep.mu is not
// held; a batch granted while ep closed goes back at once.
func (ep *Endpoint) reserveTx(cq *CQ) error {
	k, err := cq.reserveAhead(ep, creditBatch)
	if err != nil || k == 1 {
		return err
	}
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		cq.unreserveN(k - 1)
		return nil
	}
	ep.txCredits += k - 1
	ep.mu.Unlock()
	return nil
}

// returnCredits gives ep's unused slots back to cq and takes ep off its
// list for good. ep.mu is held, and ep is closed: no post takes credits
// after this.
func (ep *Endpoint) returnCredits(cq *CQ) {
	cq.mu.Lock()
	cq.reserved -= ep.txCredits
	ep.txCredits = 0
	ep.creditsReturned = true
	for i, x := range cq.creditEPs {
		if x == ep {
			cq.creditEPs = append(cq.creditEPs[:i], cq.creditEPs[i+1:]...)
			break
		}
	}
	cq.mu.Unlock()
}
