package fabric

import (
	"fmt"
	"sync"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Unexpected-message limits: messages that arrive before a matching
// receive is posted are buffered up to these bounds; past them the sender's
// operation fails with FI_ENORX instead of memory growing without bound.
const (
	MaxUnexpectedMsgs  = 1024
	MaxUnexpectedBytes = 64 << 20
)

// postedRecv is a receive buffer waiting for a message.
type postedRecv struct {
	iov      recvIOV // the buffers, filled in order (fi_recv: one)
	src      fi.Addr // FI_ADDR_UNSPEC: any source
	ctx      any
	wantComp bool // write a success completion (not FI_SELECTIVE_COMPLETION without FI_COMPLETION)
}

// rxMsg is one message being received or buffered.
type rxMsg struct {
	peer     reliable.Peer
	src      fi.Addr // what the completion reports (FI_SOURCE)
	from     fi.Addr // the peer's fi_addr, for directed receives
	total    int
	got      int
	data     []byte      // unexpected: our copy
	recv     *postedRecv // matched receive, or nil while unexpected
	complete bool
	hasData  bool   // sent with FI_REMOTE_CQ_DATA
	cqData   uint64 // ... this
}

// recvDone is what a finished receive reports, taken out of the rxMsg and
// postedRecv so that both go back to their pools before the CQ is written.
type recvDone struct {
	ctx      any
	buf      []byte // the first buffer
	size     int    // the buffers' bytes in all
	total    int
	src      fi.Addr
	wantComp bool
	hasData  bool
	cqData   uint64
}

// receiver matches incoming messages with posted receives in order: the
// oldest receive whose source matches takes the oldest message, messages
// arriving without a receive wait in a bounded unexpected queue.
type receiver struct {
	mu sync.Mutex
	// Guarded by mu.
	posted     []*postedRecv            // FIFO
	unexpected []*rxMsg                 // FIFO, complete or still arriving
	inflight   map[reliable.Peer]*rxMsg // the message each peer is sending now
	unexpBytes int
	max        int
	closed     bool
	// Free lists, so that receiving a message allocates nothing once warm.
	freeRecvs []*postedRecv
	freeMsgs  []*rxMsg
}

func (r *receiver) init(size int) {
	r.inflight = map[reliable.Peer]*rxMsg{}
	r.max = size
}

func (r *receiver) newRecv() *postedRecv {
	if n := len(r.freeRecvs); n > 0 {
		pr := r.freeRecvs[n-1]
		r.freeRecvs = r.freeRecvs[:n-1]
		return pr
	}
	return new(postedRecv)
}

func (r *receiver) newMsg() *rxMsg {
	if n := len(r.freeMsgs); n > 0 {
		m := r.freeMsgs[n-1]
		r.freeMsgs = r.freeMsgs[:n-1]
		return m
	}
	return new(rxMsg)
}

// finish takes the outcome of the complete, matched message m and returns
// m and its receive to the free lists. r.mu is held.
func (r *receiver) finish(m *rxMsg) recvDone {
	pr := m.recv
	d := recvDone{ctx: pr.ctx, buf: pr.iov.first(), size: pr.iov.size, total: m.total, src: m.src, wantComp: pr.wantComp,
		hasData: m.hasData, cqData: m.cqData}
	*pr = postedRecv{}
	*m = rxMsg{}
	r.freeRecvs = append(r.freeRecvs, pr)
	r.freeMsgs = append(r.freeMsgs, m)
	return d
}

// Recv is fi_recv: post buf for the next message from src (FI_ADDR_UNSPEC:
// any peer). It fails with FI_EAGAIN when RxSize receives are posted or the
// receive CQ has no room. On a receive CQ bound with
// FI_SELECTIVE_COMPLETION it completes successfully only with fi.COMPLETION
// in EPAttr.OpFlags; a truncated receive always completes.
func (ep *Endpoint) Recv(buf []byte, desc mr.Desc, src fi.Addr, context any) error {
	if err := ep.checkLocal(desc, buf, fi.RECV); err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	iov := [1][]byte{buf}
	return wrap("recv", ep.postRecv(iov[:], src, context, ep.attr.OpFlags&fi.COMPLETION))
}

// postRecv posts a receive of the buffers iov (checked by the caller) with
// the per-call flags of fi_recvmsg (fi.COMPLETION is the one it acts on).
func (ep *Endpoint) postRecv(iov [][]byte, src fi.Addr, context any, flags fi.Flags) error {
	ep.mu.Lock()
	cq, sel, enabled := ep.rxCQ, ep.rxSel, ep.enabled && !ep.closed
	ep.mu.Unlock()
	if !enabled {
		return fmt.Errorf("endpoint not enabled: %w", fi.EOPBADSTATE)
	}
	if cq == nil {
		return fmt.Errorf("no receive CQ bound: %w", fi.ENOCQ)
	}
	r := &ep.rx
	r.mu.Lock()
	if r.closed { // Close ran since the check above
		r.mu.Unlock()
		return fmt.Errorf("endpoint closed: %w", fi.EOPBADSTATE)
	}
	if len(r.posted) >= r.max {
		r.mu.Unlock()
		return fi.EAGAIN
	}
	if err := cq.reserve(); err != nil {
		r.mu.Unlock()
		return err
	}
	pr := r.newRecv()
	*pr = postedRecv{src: src, ctx: context, wantComp: !sel || flags&fi.COMPLETION != 0}
	pr.iov.set(iov)
	for i, m := range r.unexpected {
		if src != fi.AddrUnspec && m.from != src {
			continue
		}
		r.unexpected = append(r.unexpected[:i], r.unexpected[i+1:]...)
		r.unexpected[len(r.unexpected):][:1][0] = nil // drop the reference in the spare slot
		r.unexpBytes -= m.total
		m.recv = pr
		pr.iov.place(0, m.data[:m.got])
		m.data = nil
		if m.complete {
			d := r.finish(m)
			r.mu.Unlock()
			ep.completeRecv(cq, &d)
			return nil
		}
		r.mu.Unlock()
		return nil
	}
	r.posted = append(r.posted, pr)
	r.mu.Unlock()
	return nil
}

// deliver places one MSG segment (handler side).
func (r *receiver) deliver(ep *Endpoint, in *reliable.Incoming) fi.Errno {
	d := &in.Op
	total := int(d.Count)
	off := int(d.Addr)
	if off < 0 || off+len(in.Payload) > total {
		return fi.EINVAL
	}
	r.mu.Lock()
	m := r.inflight[in.Peer]
	if d.Flags&wire.OpFirst != 0 {
		if m != nil { // the previous message never finished: cannot happen in order
			delete(r.inflight, in.Peer)
		}
		m = r.newMsg()
		*m = rxMsg{peer: in.Peer, total: total}
		m.from = ep.av.FIAddr(in.Peer.Addr)
		m.src = ep.av.SourceAddr(in.Peer.Addr)
		if d.Flags&wire.OpCQData != 0 {
			m.hasData, m.cqData = true, d.Data
		}
		if !r.match(m) {
			if len(r.unexpected) >= MaxUnexpectedMsgs || r.unexpBytes+total > MaxUnexpectedBytes {
				r.freeMsgs = append(r.freeMsgs, m)
				r.mu.Unlock()
				return fi.ENORX
			}
			m.data = make([]byte, total)
			r.unexpected = append(r.unexpected, m)
			r.unexpBytes += total
		}
		if d.Flags&wire.OpLast == 0 {
			r.inflight[in.Peer] = m
		}
	} else if m == nil {
		// Its first segment was refused (no room): refuse the rest too.
		r.mu.Unlock()
		return fi.ENORX
	}
	if m.recv != nil {
		m.recv.iov.place(off, in.Payload)
	} else {
		copy(m.data[off:], in.Payload)
	}
	m.got += len(in.Payload)
	if d.Flags&wire.OpLast == 0 {
		r.mu.Unlock()
		return fi.SUCCESS
	}
	delete(r.inflight, in.Peer)
	m.complete = true
	if m.recv == nil { // unexpected: completes when a receive takes it
		r.mu.Unlock()
		return fi.SUCCESS
	}
	done := r.finish(m)
	r.mu.Unlock()
	ep.mu.Lock()
	cq := ep.rxCQ
	ep.mu.Unlock()
	ep.completeRecv(cq, &done)
	return fi.SUCCESS
}

// match gives m the oldest posted receive that accepts its source.
func (r *receiver) match(m *rxMsg) bool {
	for i, pr := range r.posted {
		if pr.src == fi.AddrUnspec || pr.src == m.from {
			r.posted = append(r.posted[:i], r.posted[i+1:]...)
			r.posted[len(r.posted):][:1][0] = nil
			m.recv = pr
			return true
		}
	}
	return false
}

// completeRecv reports a received message on the receive CQ, into the slot
// its Recv reserved: success, or FI_ETRUNC with the overflow length when
// the buffer was too small; remote CQ data (fi_senddata) in both.
func (ep *Endpoint) completeRecv(cq *CQ, d *recvDone) {
	cntr := ep.enabledCntr[cntrRecv]
	flags := fi.RECV | fi.MSG
	if d.hasData {
		flags |= fi.REMOTE_CQ_DATA
	}
	if d.total > d.size {
		if cntr != nil {
			cntr.AddErr(1)
		}
		e := CQErrEntry{CQEntry: CQEntry{Context: d.ctx, Flags: flags, Len: d.size, Buf: d.buf, Data: d.cqData},
			OLen: d.total - d.size, Err: fi.ETRUNC, ProvErrno: int(fi.ETRUNC), Src: d.src}
		cq.completeErr(&e, true)
		return
	}
	if cntr != nil {
		cntr.Add(1)
	}
	if !d.wantComp {
		cq.unreserve()
		return
	}
	e := CQEntry{Context: d.ctx, Flags: flags, Len: d.total, Buf: d.buf[:min(d.total, len(d.buf))], Data: d.cqData}
	cq.complete(&e, d.src, true)
}

// cancelAll drops posted receives at Close, returning their CQ slots, also
// those of receives matched with a message still arriving. Later Recv
// calls fail.
func (r *receiver) cancelAll(ep *Endpoint) {
	r.mu.Lock()
	slots := len(r.posted)
	for _, m := range r.inflight {
		if m.recv != nil {
			slots++
		}
	}
	r.posted = nil
	r.unexpected = nil
	r.unexpBytes = 0
	r.inflight = map[reliable.Peer]*rxMsg{}
	r.closed = true
	r.mu.Unlock()
	ep.mu.Lock()
	cq := ep.rxCQ
	ep.mu.Unlock()
	for range slots {
		cq.unreserve()
	}
}

// forget drops the message peer is sending now, cut short because its
// address left the AV: a receive it was matched with completes with
// FI_ECANCELED, a partial unexpected message is discarded.
func (r *receiver) forget(ep *Endpoint, peer reliable.Peer) {
	r.mu.Lock()
	m := r.inflight[peer]
	if m == nil {
		r.mu.Unlock()
		return
	}
	delete(r.inflight, peer)
	if m.recv == nil {
		for i, u := range r.unexpected {
			if u == m {
				r.unexpected = append(r.unexpected[:i], r.unexpected[i+1:]...)
				r.unexpBytes -= m.total
				break
			}
		}
		*m = rxMsg{}
		r.freeMsgs = append(r.freeMsgs, m)
		r.mu.Unlock()
		return
	}
	d := r.finish(m)
	r.mu.Unlock()
	ep.mu.Lock()
	cq, cntr := ep.rxCQ, ep.cntr[cntrRecv]
	ep.mu.Unlock()
	if cntr != nil {
		cntr.AddErr(1)
	}
	e := CQErrEntry{CQEntry: CQEntry{Context: d.ctx, Flags: fi.RECV | fi.MSG, Buf: d.buf},
		Err: fi.ECANCELED, ProvErrno: int(fi.ECANCELED), Src: d.src}
	if cq != nil {
		cq.completeErr(&e, true)
	}
}
