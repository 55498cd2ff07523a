package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// Cancel is fi_cancel: the posted receive (fi_recv or fi_trecv, any form)
// posted with context and not matched yet completes with an FI_ECANCELED
// error entry (its tag, and FI_RECV with FI_MSG or FI_TAGGED) and leaves
// the queue; when several have that context, the oldest. A receive
// already matched with a message, arriving or arrived, is not cancelled:
// it completes as it would have, and so does a send (sends are not
// cancelled). A FI_MULTI_RECV buffer is released: with no message in it
// its error entry carries fi.MULTI_RECV, else it takes no further
// message and the last of its messages to complete carries fi.MULTI_RECV.
// Cancel returns nil whether or not it found the operation (the
// completion says what happened), FI_EINVAL for a context that cannot
// identify one (nil, or not comparable), FI_EOPBADSTATE before Enable.
func (ep *Endpoint) Cancel(context any) error {
	if !validContext(context) {
		return fmt.Errorf("cancel: context %T cannot identify an operation: %w", context, fi.EINVAL)
	}
	ep.mu.Lock()
	enabled := ep.enabled && !ep.closed
	ep.mu.Unlock()
	if !enabled {
		return fmt.Errorf("cancel: endpoint not enabled: %w", fi.EOPBADSTATE)
	}
	r := &ep.rx
	if r.cq == nil {
		return nil // no receive can have been posted
	}
	r.mu.Lock()
	for _, q := range []*recvQueue{&r.posted, &r.tposted} {
		for pr := q.head; pr != nil; pr = pr.next {
			if pr.ctx != context {
				continue
			}
			q.remove(pr)
			if pr.multi {
				pr.released = true
				if pr.pending > 0 {
					r.mu.Unlock()
					return nil
				}
			}
			d := recvDone{ctx: pr.ctx, flags: fi.RECV | fi.MSG, tag: pr.spec.tag, buf: pr.iov[0],
				src: fi.AddrNotAvail, err: fi.ECANCELED}
			if pr.spec.tagged {
				d.flags = fi.RECV | fi.TAGGED
			}
			if pr.multi {
				d.flags |= fi.MULTI_RECV
			}
			r.slots--
			r.freeRecv(pr)
			r.mu.Unlock()
			r.complete(&d)
			return nil
		}
	}
	r.mu.Unlock()
	return nil
}
