package fabric

import (
	"sync"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// Unexpected-message limits. Messages that arrive before a receive that
// takes them wait in the unexpected queues (tagged and untagged together)
// up to MaxUnexpectedMsgs messages and MaxUnexpectedBytes bytes of eager
// data; a rendezvous message (above the eager limit) waits as its header
// alone, counting as a message and no bytes. Past either bound the
// message is refused: the sender's operation completes with FI_ENORX and
// nothing of it is kept, so memory stays bounded and nothing accepted is
// lost. Later messages are accepted again once receives drain the queue.
// Messages claimed with FI_PEEK|FI_CLAIM stay counted until received or
// discarded.
const (
	MaxUnexpectedMsgs  = 1024
	MaxUnexpectedBytes = 64 << 20
)

// DefaultMinMultiRecv is FI_OPT_MIN_MULTI_RECV's default: a FI_MULTI_RECV
// buffer is released once less than this is left in it.
const DefaultMinMultiRecv = 16 << 10

// postedRecv is a posted receive buffer (fi_recv, fi_trecv and their V
// and msg forms).
type postedRecv struct {
	next, prev *postedRecv // recvQueue links
	run        *recvRun    // the recvQueue run it is in
	queued     bool        // in a posted queue
	spec       matchSpec
	iov        [IovLimit][]byte
	niov       int
	size       int // bytes of iov
	ctx        any
	wantComp   bool // write a success completion (not FI_SELECTIVE_COMPLETION without FI_COMPLETION)
	// FI_MULTI_RECV: messages are packed one after another from used
	// on; once less than min is left the buffer leaves the queue
	// (released) and the last of its messages to complete carries
	// FI_MULTI_RECV.
	multi    bool
	min      int
	used     int
	pending  int  // messages placed in it, not completed
	released bool // out of the queue for good: full, or cancelled
}

// rxMsg is one message being received, or waiting unexpected.
type rxMsg struct {
	next, prev *rxMsg // msgQueue links
	peer       reliable.Peer
	src        fi.Addr // what the completion reports (FI_SOURCE)
	from       fi.Addr // the peer's fi_addr, for directed receives
	tagged     bool
	tag        uint64
	total      int    // message length
	got        int    // bytes arrived
	data       []byte // unexpected eager message: our copy
	unexp      bool   // counted in the unexpected bounds
	recv       *postedRecv
	off, room  int // where it lands in recv, and how much of it fits
	complete   bool
	hasData    bool   // sent with FI_REMOTE_CQ_DATA
	cqData     uint64 // ... this
	claimed    bool   // FI_PEEK|FI_CLAIM took it, for the receive with claimCtx
	claimCtx   any
	discard    bool // FI_DISCARD dropped it while it was still arriving

	// Rendezvous (see rendezvous.go).
	rndv     bool
	handle   uint64 // the sender's, from the RTS
	rid      uint32 // ours, in rcv.rndv while its data is due
	ctsOut   bool   // its CTS is with the engine
	finished bool   // its receive completed; free once ctsOut clears
	cts      [wire.CTSLen]byte
}

// recvDone is what a finished receive reports, taken out of the rxMsg and
// postedRecv so that both go back to their pools before the CQ is written.
type recvDone struct {
	ctx     any
	flags   fi.Flags
	buf     []byte
	len     int
	olen    int
	tag     uint64
	data    uint64
	src     fi.Addr
	err     fi.Errno
	write   bool // write a success completion into its slot (else the slot is returned)
	unreser int  // further reserved slots to return (a released multi-recv buffer's own)
}

// receiver matches incoming messages with posted receives (match.go).
// Every posted receive holds a CQ slot (slots counts them, plus one per
// message placed in a multi-recv buffer), so that a receive's completion
// is never dropped.
type receiver struct {
	mu sync.Mutex
	// Guarded by mu.
	posted, tposted recvQueue
	unexp, tunexp   msgQueue
	claimed         msgQueue                 // FI_PEEK|FI_CLAIM
	inflight        map[reliable.Peer]*rxMsg // the eager message each peer is sending now
	rndv            map[uint32]*rxMsg        // rendezvous messages whose data is due, by rid
	nextRid         uint32
	unexpMsgs       int
	unexpBytes      int
	max             int // RxSize
	slots           int // CQ slots reserved
	closed          bool
	minMultiRecv    int
	// Free lists, so that receiving a message allocates nothing once warm.
	freeRecvs []*postedRecv
	freeMsgs  []*rxMsg
	pool      bufPool

	// Set by Enable before traffic flows, read-only after.
	cq       *CQ
	sel      bool // the receive CQ is bound with FI_SELECTIVE_COMPLETION
	directed bool // FI_DIRECTED_RECV
	av       *av.AV
	cntr     *Cntr
}

func (r *receiver) init(size int) {
	r.inflight = map[reliable.Peer]*rxMsg{}
	r.rndv = map[uint32]*rxMsg{}
	r.max = size
	r.minMultiRecv = DefaultMinMultiRecv
}

func (r *receiver) newRecv() *postedRecv {
	if n := len(r.freeRecvs); n > 0 {
		pr := r.freeRecvs[n-1]
		r.freeRecvs = r.freeRecvs[:n-1]
		return pr
	}
	return new(postedRecv)
}

func (r *receiver) freeRecv(pr *postedRecv) {
	*pr = postedRecv{}
	r.freeRecvs = append(r.freeRecvs, pr)
}

func (r *receiver) newMsg() *rxMsg {
	if n := len(r.freeMsgs); n > 0 {
		m := r.freeMsgs[n-1]
		r.freeMsgs = r.freeMsgs[:n-1]
		return m
	}
	return new(rxMsg)
}

// freeMsg returns m to the free list, its buffer to the pool. A
// rendezvous message whose CTS the engine still holds stays alive until
// that completes (ctsDone frees it).
func (r *receiver) freeMsg(m *rxMsg) {
	if m.ctsOut {
		m.finished = true
		return
	}
	r.pool.put(m.data)
	*m = rxMsg{}
	r.freeMsgs = append(r.freeMsgs, m)
}

// dropUnexp takes m out of the unexpected accounting (and queue).
func (r *receiver) dropUnexp(m *rxMsg) {
	if !m.unexp {
		return
	}
	if !m.claimed {
		r.unexpQueue(m.tagged).remove(m)
	}
	m.unexp = false
	r.unexpMsgs--
	if !m.rndv {
		r.unexpBytes -= m.total
	}
}

// assign matches m with pr: where m lands and how much of it fits. For a
// multi-recv buffer it takes a further CQ slot (false when the CQ has no
// room: the message cannot be taken) and may release the buffer.
func (r *receiver) assign(m *rxMsg, pr *postedRecv) bool {
	m.recv = pr
	if !pr.multi {
		if pr.queued {
			r.postedQueue(pr.spec.tagged).remove(pr)
		}
		m.off, m.room = 0, min(m.total, pr.size)
		return true
	}
	if err := r.cq.reserve(); err != nil {
		m.recv = nil
		return false
	}
	r.slots++
	m.off, m.room = pr.used, min(m.total, pr.size-pr.used)
	pr.used += m.room
	pr.pending++
	if pr.size-pr.used < pr.min {
		pr.released = true
		if pr.queued {
			r.postedQueue(pr.spec.tagged).remove(pr)
		}
	}
	return true
}

// place copies p, bytes [off, off+len(p)) of m, into m's receive,
// cutting what does not fit.
func place(m *rxMsg, off int, p []byte) {
	if off >= m.room {
		return
	}
	if len(p) > m.room-off {
		p = p[:m.room-off]
	}
	pr := m.recv
	at := m.off + off
	if pr.niov == 1 {
		copy(pr.iov[0][at:], p)
		return
	}
	for _, b := range pr.iov[:pr.niov] {
		if len(p) == 0 {
			return
		}
		if at >= len(b) {
			at -= len(b)
			continue
		}
		n := copy(b[at:], p)
		p, at = p[n:], 0
	}
}

// finish takes the outcome of the complete, matched message m and returns
// m (and its receive, unless a multi-recv buffer still in use) to the
// free lists. r.mu is held.
func (r *receiver) finish(m *rxMsg) recvDone {
	pr := m.recv
	d := recvDone{ctx: pr.ctx, len: m.room, tag: m.tag, data: m.cqData, src: m.src, write: pr.wantComp}
	d.flags = fi.RECV | fi.MSG
	if m.tagged {
		d.flags = fi.RECV | fi.TAGGED
	}
	if m.hasData {
		d.flags |= fi.REMOTE_CQ_DATA
	}
	b := pr.iov[0]
	switch {
	case pr.multi:
		d.buf = b[m.off : m.off+m.room]
	case m.total > m.room:
		d.buf = b
	default:
		d.buf = b[:min(m.room, len(b))]
	}
	if m.total > m.room {
		d.err, d.olen = fi.ETRUNC, m.total-m.room
	}
	r.slots--
	if pr.multi {
		pr.pending--
		if pr.released && pr.pending == 0 {
			// Released and drained: this completion says so, written
			// even under FI_SELECTIVE_COMPLETION; the buffer's own slot
			// goes back.
			d.flags |= fi.MULTI_RECV
			d.write = true
			d.unreser = 1
			r.slots--
			r.freeRecv(pr)
		}
	} else {
		r.freeRecv(pr)
	}
	m.recv = nil
	r.freeMsg(m)
	return d
}

// complete writes a finished receive's completion into its reserved slot:
// success, or an error entry (FI_ETRUNC with the overflow length,
// FI_ECANCELED, ...); remote CQ data and the tag in both.
func (r *receiver) complete(d *recvDone) {
	cq := r.cq
	if d.err != fi.SUCCESS {
		if r.cntr != nil {
			r.cntr.AddErr(1)
		}
		e := CQErrEntry{CQEntry: CQEntry{Context: d.ctx, Flags: d.flags, Len: d.len, Buf: d.buf, Data: d.data, Tag: d.tag},
			OLen: d.olen, Err: d.err, ProvErrno: int(d.err), Src: d.src}
		cq.completeErr(&e, true)
	} else {
		if r.cntr != nil && d.flags&(fi.RECV) != 0 {
			r.cntr.Add(1)
		}
		if d.write {
			e := CQEntry{Context: d.ctx, Flags: d.flags, Len: d.len, Buf: d.buf, Data: d.data, Tag: d.tag}
			cq.complete(&e, d.src, true)
		} else {
			cq.unreserve()
		}
	}
	for range d.unreser {
		cq.unreserve()
	}
}

// deliver handles one MSG op (the handler side, the engine's receive
// goroutine).
func (r *receiver) deliver(ep *Endpoint, in *reliable.Incoming) fi.Errno {
	switch in.Op.MsgProto() {
	case wire.MsgEager:
		return r.deliverEager(ep, in)
	case wire.MsgRTS:
		return r.deliverRTS(ep, in)
	case wire.MsgCTS:
		return ep.handleCTS(in)
	case wire.MsgData:
		return r.deliverData(ep, in)
	}
	return fi.EINVAL
}

// newArrival fills m from the first op of a message.
func (r *receiver) newArrival(ep *Endpoint, m *rxMsg, in *reliable.Incoming, total int) {
	d := &in.Op
	*m = rxMsg{peer: in.Peer, total: total}
	m.from, m.src = ep.av.Resolve(in.Peer.Addr)
	if d.MsgFlags()&wire.MsgTagged != 0 {
		m.tagged, m.tag = true, d.RKey
	}
	if d.Flags&wire.OpCQData != 0 {
		m.hasData, m.cqData = true, d.Data
	}
}

// deliverEager places one segment of an eager message.
func (r *receiver) deliverEager(ep *Endpoint, in *reliable.Incoming) fi.Errno {
	d := &in.Op
	total := int(d.Count)
	off := int(d.Addr)
	if off < 0 || d.Addr > uint64(total) || off+len(in.Payload) > total {
		return fi.EINVAL
	}
	r.mu.Lock()
	var m *rxMsg
	if d.Flags&wire.OpFirst != 0 {
		// A message of one segment (most) neither finds nor leaves an
		// entry in inflight: no map lookup for it.
		if len(r.inflight) > 0 { // the previous message never finished: cannot happen in order
			delete(r.inflight, in.Peer)
		}
		m = r.newMsg()
		r.newArrival(ep, m, in, total)
		pr := r.findPosted(m)
		if pr == nil || !r.assign(m, pr) {
			if r.unexpMsgs >= MaxUnexpectedMsgs || r.unexpBytes+total > MaxUnexpectedBytes {
				r.freeMsg(m)
				r.mu.Unlock()
				return fi.ENORX
			}
			m.data = r.pool.get(total)
			m.unexp = true
			r.unexpQueue(m.tagged).push(m)
			r.unexpMsgs++
			r.unexpBytes += total
		}
		if d.Flags&wire.OpLast == 0 {
			r.inflight[in.Peer] = m
		}
	} else if m = r.inflight[in.Peer]; m == nil || m.total != total {
		// Its first segment was refused (no room): refuse the rest too.
		r.mu.Unlock()
		return fi.ENORX
	}
	switch {
	case m.recv != nil:
		place(m, off, in.Payload)
	case !m.discard:
		copy(m.data[off:], in.Payload)
	}
	m.got += len(in.Payload)
	if d.Flags&wire.OpLast == 0 {
		r.mu.Unlock()
		return fi.SUCCESS
	}
	if d.Flags&wire.OpFirst == 0 {
		delete(r.inflight, in.Peer)
	}
	m.complete = true
	switch {
	case m.discard:
		r.freeMsg(m)
		r.mu.Unlock()
		return fi.SUCCESS
	case m.recv == nil: // unexpected: completes when a receive takes it
		r.mu.Unlock()
		return fi.SUCCESS
	}
	done := r.finish(m)
	r.mu.Unlock()
	r.complete(&done)
	return fi.SUCCESS
}

// take gives the unexpected (or claimed) message m to pr: what arrived so
// far is copied over; a complete eager message finishes at once (fin, d
// to complete), a rendezvous one gets its CTS queued (ep.kickCtl sends
// it). ok is false when pr, a multi-recv buffer, cannot take it (no CQ
// room). r.mu is held.
func (r *receiver) take(ep *Endpoint, m *rxMsg, pr *postedRecv) (d recvDone, fin, ok bool) {
	if !r.assign(m, pr) {
		return d, false, false
	}
	r.dropUnexp(m)
	if m.claimed {
		r.claimed.remove(m)
		m.claimed, m.claimCtx = false, nil
	}
	if m.rndv {
		return r.acceptRndv(ep, m)
	}
	place(m, 0, m.data[:m.got])
	r.pool.put(m.data)
	m.data = nil
	if m.complete {
		return r.finish(m), true, true
	}
	return d, false, true
}

// cancelAll drops posted receives and pending messages at Close,
// returning every CQ slot the receiver holds. Later posts fail.
func (r *receiver) cancelAll() {
	r.mu.Lock()
	slots := r.slots
	r.posted, r.tposted = recvQueue{}, recvQueue{}
	r.unexp, r.tunexp, r.claimed = msgQueue{}, msgQueue{}, msgQueue{}
	r.unexpMsgs, r.unexpBytes, r.slots = 0, 0, 0
	r.inflight = map[reliable.Peer]*rxMsg{}
	r.rndv = map[uint32]*rxMsg{}
	r.closed = true
	r.mu.Unlock()
	for range slots {
		r.cq.unreserve()
	}
}

// forget drops what peer is sending now, cut short because its address
// left the AV: a receive its message was matched with completes with
// FI_ECANCELED, a partial unexpected message is discarded, and so are its
// rendezvous messages (their data will never come).
func (r *receiver) forget(peer reliable.Peer) {
	var dones []recvDone
	r.mu.Lock()
	cut := func(m *rxMsg) {
		if m.recv == nil {
			r.dropUnexp(m)
			if m.claimed {
				r.claimed.remove(m)
			}
			r.freeMsg(m)
			return
		}
		d := r.finish(m)
		d.err, d.olen, d.len = fi.ECANCELED, 0, 0
		dones = append(dones, d)
	}
	if m := r.inflight[peer]; m != nil {
		delete(r.inflight, peer)
		cut(m)
	}
	for rid, m := range r.rndv {
		if m.peer == peer {
			delete(r.rndv, rid)
			cut(m)
		}
	}
	for _, q := range []*msgQueue{&r.unexp, &r.tunexp, &r.claimed} {
		for m := q.head; m != nil; {
			next := m.next
			if m.peer == peer && m.rndv {
				cut(m)
			}
			m = next
		}
	}
	r.mu.Unlock()
	for i := range dones {
		r.complete(&dones[i])
	}
}
