package fabric

import (
	"fmt"
	"reflect"

	"github.com/xdpfab/xdpfab/fi"
)

// The peek family of fi_trecvmsg (fi_tagged(3)), served from the tagged
// unexpected queue, oldest message first:
//
//   - FI_PEEK reports the first message the receive would match without
//     receiving it: its length, tag, remote CQ data and source (a
//     success entry whose Buf is the caller's first buffer when the data
//     was copied there: a complete eager message; rendezvous and still
//     arriving messages report no data), or an FI_ENOMSG error entry when
//     there is none. The entry is written even under
//     FI_SELECTIVE_COMPLETION. A peek is not queued: it completes before
//     the call returns.
//   - FI_PEEK|FI_CLAIM also takes the message out of matching: only a
//     later FI_CLAIM receive with the same context gets it (or FI_CLAIM|
//     FI_DISCARD drops it). Until then it stays counted in the unexpected
//     bounds. Contexts must be comparable and not nil.
//   - FI_PEEK|FI_DISCARD drops the message it reports.
//   - FI_CLAIM receives the claimed message like any receive; a context
//     that claimed nothing fails with FI_EINVAL.
//   - FI_CLAIM|FI_DISCARD drops the claimed message, with a success entry
//     reporting it.
//
// A dropped rendezvous message is answered with an empty CTS, so its
// sender completes (the message was consumed); a dropped message still
// arriving takes its remaining segments and throws them away.

// validContext reports whether ctx can identify an operation: not nil,
// of a comparable type.
func validContext(ctx any) bool { return ctx != nil && reflect.TypeOf(ctx).Comparable() }

func (ep *Endpoint) peek(iov [][]byte, spec matchSpec, ctx any, flags fi.Flags) error {
	if err := ep.rxReady(); err != nil {
		return err
	}
	if flags&fi.CLAIM != 0 && !validContext(ctx) {
		return fmt.Errorf("FI_CLAIM needs a context of a comparable type, got %T: %w", ctx, fi.EINVAL)
	}
	r := &ep.rx
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("endpoint closed: %w", fi.EOPBADSTATE)
	}
	if flags&fi.PEEK == 0 {
		return r.claim(ep, iov, ctx, flags) // unlocks
	}
	if err := r.cq.reserve(); err != nil {
		r.mu.Unlock()
		return err
	}
	m := r.findUnexpected(&spec)
	if m == nil {
		r.mu.Unlock()
		e := CQErrEntry{CQEntry: CQEntry{Context: ctx, Flags: fi.RECV | fi.TAGGED, Tag: spec.tag},
			Err: fi.ENOMSG, ProvErrno: int(fi.ENOMSG), Src: fi.AddrNotAvail}
		r.cq.completeErr(&e, true)
		return nil
	}
	e := peekEntry(m, ctx)
	src := m.src
	if !m.rndv && m.complete && flags&fi.DISCARD == 0 && len(iov) > 0 {
		n := 0
		for _, b := range iov {
			n += copy(b, m.data[n:m.total])
		}
		e.Buf = iov[0]
	}
	switch {
	case flags&fi.CLAIM != 0:
		r.unexpQueue(m.tagged).remove(m)
		m.claimed, m.claimCtx = true, ctx
		r.claimed.push(m)
	case flags&fi.DISCARD != 0:
		r.discard(ep, m)
	}
	r.mu.Unlock()
	r.cq.complete(&e, src, true)
	ep.kickCtl()
	return nil
}

// peekEntry is the completion reporting m.
func peekEntry(m *rxMsg, ctx any) CQEntry {
	e := CQEntry{Context: ctx, Flags: fi.RECV | fi.TAGGED, Len: m.total, Tag: m.tag}
	if m.hasData {
		e.Flags |= fi.REMOTE_CQ_DATA
		e.Data = m.cqData
	}
	return e
}

// claim serves an FI_CLAIM receive: the message claimed with ctx is
// received into iov, or dropped with FI_DISCARD. r.mu is held; claim
// releases it.
func (r *receiver) claim(ep *Endpoint, iov [][]byte, ctx any, flags fi.Flags) error {
	var m *rxMsg
	for c := r.claimed.head; c != nil; c = c.next {
		if c.claimCtx == ctx {
			m = c
			break
		}
	}
	if m == nil {
		r.mu.Unlock()
		return fmt.Errorf("FI_CLAIM: no message claimed with context %v: %w", ctx, fi.EINVAL)
	}
	if err := r.cq.reserve(); err != nil {
		r.mu.Unlock()
		return err
	}
	if flags&fi.DISCARD != 0 {
		e := peekEntry(m, ctx)
		src := m.src
		r.discard(ep, m)
		r.mu.Unlock()
		r.cq.complete(&e, src, true)
		ep.kickCtl()
		return nil
	}
	r.slots++
	pr := r.newRecv()
	pr.spec = matchSpec{tagged: true, tag: m.tag, src: fi.AddrUnspec}
	pr.ctx = ctx
	pr.wantComp = !r.sel || flags&fi.COMPLETION != 0
	pr.niov = copy(pr.iov[:], iov)
	for _, b := range iov {
		pr.size += len(b)
	}
	rndv := m.rndv
	d, fin, _ := r.take(ep, m, pr)
	r.mu.Unlock()
	if rndv {
		ep.kickCtl()
	}
	if fin {
		r.complete(&d)
	}
	return nil
}

// discard drops the unexpected or claimed message m. r.mu is held.
func (r *receiver) discard(ep *Endpoint, m *rxMsg) {
	r.dropUnexp(m)
	if m.claimed {
		r.claimed.remove(m)
		m.claimed, m.claimCtx = false, nil
	}
	switch {
	case m.rndv:
		r.acceptRndv(ep, m) // an empty CTS: the sender completes
	case m.complete:
		r.freeMsg(m)
	default: // still arriving: deliverEager drops the rest and frees it
		m.discard = true
		r.pool.put(m.data)
		m.data = nil
	}
}
