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
	buf  []byte
	src  fi.Addr // FI_ADDR_UNSPEC: any source
	ctx  any
	used bool
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
}

func (r *receiver) init(size int) {
	r.inflight = map[reliable.Peer]*rxMsg{}
	r.max = size
}

// Recv is fi_recv: post buf for the next message from src (FI_ADDR_UNSPEC:
// any peer). It fails with FI_EAGAIN when RxSize receives are posted or the
// receive CQ has no room.
func (ep *Endpoint) Recv(buf []byte, desc mr.Desc, src fi.Addr, context any) error {
	if err := ep.checkLocal(desc, buf, fi.RECV); err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	ep.mu.Lock()
	cq, enabled := ep.rxCQ, ep.enabled && !ep.closed
	ep.mu.Unlock()
	if !enabled {
		return fmt.Errorf("recv: endpoint not enabled: %w", fi.EOPBADSTATE)
	}
	if cq == nil {
		return fmt.Errorf("recv: no receive CQ bound: %w", fi.ENOCQ)
	}
	from := fi.AddrUnspec
	if src != fi.AddrUnspec {
		from = src
	}
	r := &ep.rx
	r.mu.Lock()
	if len(r.posted) >= r.max {
		r.mu.Unlock()
		return fi.EAGAIN
	}
	if err := cq.reserve(); err != nil {
		r.mu.Unlock()
		return err
	}
	pr := &postedRecv{buf: buf, src: from, ctx: context}
	for i, m := range r.unexpected {
		if from != fi.AddrUnspec && m.from != from {
			continue
		}
		r.unexpected = append(r.unexpected[:i], r.unexpected[i+1:]...)
		r.unexpBytes -= m.total
		m.recv = pr
		copy(pr.buf, m.data[:m.got])
		m.data = nil
		if m.complete {
			r.mu.Unlock()
			ep.completeRecv(cq, m)
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
		m = &rxMsg{peer: in.Peer, total: total}
		m.from = ep.av.FIAddr(in.Peer.Addr)
		m.src = ep.av.SourceAddr(in.Peer.Addr)
		if !r.match(m) {
			if len(r.unexpected) >= MaxUnexpectedMsgs || r.unexpBytes+total > MaxUnexpectedBytes {
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
		if off < len(m.recv.buf) {
			copy(m.recv.buf[off:], in.Payload)
		}
	} else {
		copy(m.data[off:], in.Payload)
	}
	m.got += len(in.Payload)
	last := d.Flags&wire.OpLast != 0
	if last {
		delete(r.inflight, in.Peer)
		m.complete = true
	}
	matched := m.recv != nil
	r.mu.Unlock()
	if last && matched {
		ep.mu.Lock()
		cq := ep.rxCQ
		ep.mu.Unlock()
		ep.completeRecv(cq, m)
	}
	return fi.SUCCESS
}

// match gives m the oldest posted receive that accepts its source.
func (r *receiver) match(m *rxMsg) bool {
	for i, pr := range r.posted {
		if pr.src == fi.AddrUnspec || pr.src == m.from {
			r.posted = append(r.posted[:i], r.posted[i+1:]...)
			m.recv = pr
			return true
		}
	}
	return false
}

// completeRecv reports a received message on the receive CQ: success, or
// FI_ETRUNC with the overflow length when the buffer was too small.
func (ep *Endpoint) completeRecv(cq *CQ, m *rxMsg) {
	pr := m.recv
	ep.mu.Lock()
	cntr := ep.cntr[cntrRecv]
	ep.mu.Unlock()
	if m.total > len(pr.buf) {
		e := CQErrEntry{CQEntry: CQEntry{Context: pr.ctx, Flags: fi.RECV | fi.MSG, Len: len(pr.buf), Buf: pr.buf},
			OLen: m.total - len(pr.buf), Err: fi.ETRUNC, ProvErrno: int(fi.ETRUNC), Src: m.src}
		cq.completeErr(&e, true)
		if cntr != nil {
			cntr.AddErr(1)
		}
		return
	}
	e := CQEntry{Context: pr.ctx, Flags: fi.RECV | fi.MSG, Len: m.total, Buf: pr.buf[:m.total]}
	cq.complete(&e, m.src, true)
	if cntr != nil {
		cntr.Add(1)
	}
}

// cancelAll drops posted receives at Close, returning their CQ slots.
func (r *receiver) cancelAll(ep *Endpoint) {
	r.mu.Lock()
	posted := r.posted
	r.posted = nil
	r.unexpected = nil
	r.inflight = map[reliable.Peer]*rxMsg{}
	r.mu.Unlock()
	ep.mu.Lock()
	cq := ep.rxCQ
	ep.mu.Unlock()
	for range posted {
		cq.unreserve()
	}
}
