package fabric

import (
	"errors"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// Rendezvous. A message longer than the endpoint's eager limit
// (DefaultEagerLimit, FI_OPT_BUFFERED_LIMIT) is not sent at once: the
// sender sends a ready-to-send (RTS: the length, the tag, remote CQ data
// and a handle for the send) and keeps its buffer. The receiver matches
// the RTS like any message (an unexpected one waits as its header alone,
// no data), and once matched answers with a clear-to-send (CTS: the
// sender's handle, a handle of its own, how many bytes fit the receive);
// the sender then pushes that many bytes straight from its buffer, as
// rendezvous data addressed to the receiver's handle, which lands them
// straight in the posted buffer. So a large message moves once, with no
// copy of it anywhere between the two buffers but the packets themselves,
// and the send completes when the last pushed byte has been placed (the
// receiver's datapath acknowledges it after placing it).
//
// The send buffer is never registered or otherwise exposed: nothing reads
// it but the sender's own datapath, and only after a CTS that names a
// live handle (an op index and a generation that changes with every use
// of the slot) and comes from the very peer the RTS went to; any other CTS
// is refused (FI_ENOENT) and moves nothing. Rendezvous data is accepted
// only for a live receive handle from the peer it was granted to, within
// the granted length.
//
// Failures: an RTS the receiver refuses (full unexpected queue:
// FI_ENORX) or that times out fails the send. A CTS that fails (the
// sender is gone or forgot the send) fails the receive with that error.
// A message whose data never comes after a CTS (the sender died after
// acknowledging it) keeps its receive until the sender's address is
// removed from the AV (FI_ECANCELED) or the endpoint closes.
//
// CTSs and pushes are requests of the endpoint's own engine, queued
// (ctl) and resubmitted as engine slots free up should the engine be full.

// DefaultEagerLimit is the largest message sent eagerly (in one go,
// buffered by the receiver when no receive is posted); longer ones use
// the rendezvous protocol. FI_OPT_BUFFERED_LIMIT reads and sets it per
// endpoint, between the inject size and MaxEagerLimit.
const DefaultEagerLimit = 64 << 10

// MaxEagerLimit bounds FI_OPT_BUFFERED_LIMIT.
const MaxEagerLimit = 1 << 20

// rndvSend is the sender's state of one rendezvous send, by op index.
// Guarded by Endpoint.rndvMu.
type rndvSend struct {
	op      *txOp
	gen     uint32 // changes with every use of the slot: part of the handle
	active  bool
	peer    reliable.Peer
	authKey uint32
	iov     [IovLimit][]byte
	niov    int
	total   int
	rtsOut  bool // the RTS is with the engine
	pushing int  // pushes with the engine (or queued for it)
	cts     bool // the CTS came
	done    bool // everything the CTS asked for was pushed and placed
	err     fi.Errno
	rts     [wire.RTSLen]byte
}

func (rs *rndvSend) handle() uint64 { return uint64(rs.op.idx) | uint64(rs.gen)<<32 }

// sendRndv sends the RTS of a message of total bytes in iov (or one).
// r is the RTS request with tag, flags and data set.
func (ep *Endpoint) sendRndv(r *reliable.Request, one []byte, iov [][]byte, total int, dest fi.Addr,
	flags fi.Flags, cqFlags fi.Flags, ctx any) error {
	o, err := ep.begin(r, dest, flags&^fi.INJECT, cntrSend, cqFlags, ctx, false)
	if err != nil {
		return err
	}
	ep.rndvMu.Lock()
	if ep.rndvs == nil {
		ep.rndvs = make([]rndvSend, len(ep.ops))
	}
	rs := &ep.rndvs[o.idx]
	*rs = rndvSend{op: o, gen: rs.gen + 1, active: true, peer: r.Peer, authKey: r.AuthKey, total: total, rtsOut: true}
	if iov == nil {
		rs.iov[0], rs.niov = one, 1
	} else {
		rs.niov = copy(rs.iov[:], iov)
	}
	(&wire.RTS{Len: uint64(total), Handle: rs.handle()}).Put(rs.rts[:])
	r.Payload = rs.rts[:]
	ep.rndvMu.Unlock()
	o.rndv = true
	r.Datatype = uint8(wire.MsgRTS)
	if err := ep.eng.Submit(r); err != nil {
		ep.rndvMu.Lock()
		*rs = rndvSend{gen: rs.gen}
		ep.rndvMu.Unlock()
		ep.abort(o)
		return err
	}
	return nil
}

// handleCTS serves a CTS for one of our rendezvous sends: it queues the
// pushes of the bytes asked for (receive goroutine).
func (ep *Endpoint) handleCTS(in *reliable.Incoming) fi.Errno {
	var cts wire.CTS
	if in.Op.Flags&(wire.OpFirst|wire.OpLast) != wire.OpFirst|wire.OpLast || cts.Parse(in.Payload) != nil {
		return fi.EINVAL
	}
	idx, gen := uint32(cts.Handle), uint32(cts.Handle>>32)
	ep.rndvMu.Lock()
	if int(idx) >= len(ep.rndvs) {
		ep.rndvMu.Unlock()
		return fi.ENOENT
	}
	rs := &ep.rndvs[idx]
	if !rs.active || rs.gen != gen || rs.peer != in.Peer || rs.cts || rs.err != fi.SUCCESS {
		ep.rndvMu.Unlock()
		return fi.ENOENT
	}
	rs.cts = true
	left := min(int(cts.Accept), rs.total)
	base := 0
	for _, b := range rs.iov[:rs.niov] {
		if left == 0 {
			break
		}
		if len(b) == 0 {
			continue
		}
		b = b[:min(len(b), left)]
		rs.pushing++
		ep.queueCtl(reliable.Request{Peer: rs.peer, AuthKey: rs.authKey, Opcode: wire.OpMsg,
			Datatype: uint8(wire.MsgData), RKey: wire.RndvKey(cts.Recv, uint32(base)), Payload: b, Context: rs})
		base += len(b)
		left -= len(b)
	}
	var fin bool
	if rs.pushing == 0 {
		rs.done = true
		fin = ep.rndvFinishing(rs)
	}
	ep.rndvMu.Unlock()
	if fin {
		ep.finishRndv(rs)
	}
	ep.kickCtl()
	return fi.SUCCESS
}

// rndvFinishing reports whether rs is over (nothing with the engine, and
// done or failed) and, if so, retires it so that it finishes once.
// ep.rndvMu is held.
func (ep *Endpoint) rndvFinishing(rs *rndvSend) bool {
	if !rs.active || rs.rtsOut || rs.pushing > 0 || (!rs.done && rs.err == fi.SUCCESS) {
		return false
	}
	rs.active = false
	return true
}

// finishRndv completes the user's send of a retired rndvSend.
func (ep *Endpoint) finishRndv(rs *rndvSend) {
	ep.rndvMu.Lock()
	o, err, n := rs.op, rs.err, rs.total
	gen := rs.gen
	*rs = rndvSend{gen: gen}
	ep.rndvMu.Unlock()
	ep.finishOp(o, err, n)
}

// rtsDone is the engine's completion of an RTS.
func (ep *Endpoint) rtsDone(o *txOp, err fi.Errno) {
	ep.rndvMu.Lock()
	rs := &ep.rndvs[o.idx]
	rs.rtsOut = false
	if err != fi.SUCCESS && rs.err == fi.SUCCESS {
		rs.err = err
	}
	fin := ep.rndvFinishing(rs)
	ep.rndvMu.Unlock()
	if fin {
		ep.finishRndv(rs)
	}
}

// pushDone is the engine's completion of one push.
func (ep *Endpoint) pushDone(rs *rndvSend, err fi.Errno) {
	ep.rndvMu.Lock()
	rs.pushing--
	if err != fi.SUCCESS && rs.err == fi.SUCCESS {
		rs.err = err
	}
	if rs.pushing == 0 && rs.err == fi.SUCCESS {
		rs.done = true
	}
	fin := ep.rndvFinishing(rs)
	ep.rndvMu.Unlock()
	if fin {
		ep.finishRndv(rs)
	}
}

// cancelRndvSends fails the rendezvous sends waiting for a CTS, to peer
// or (nil) to anyone, with FI_ECANCELED (fi_av_remove, Close). Those with
// requests in the engine finish as the engine cancels them.
func (ep *Endpoint) cancelRndvSends(peer *reliable.Peer) {
	for {
		var rs *rndvSend
		ep.rndvMu.Lock()
		for i := range ep.rndvs {
			s := &ep.rndvs[i]
			if s.active && (peer == nil || s.peer == *peer) && !s.rtsOut && s.pushing == 0 {
				if s.err == fi.SUCCESS {
					s.err = fi.ECANCELED
				}
				if ep.rndvFinishing(s) {
					rs = s
					break
				}
			}
		}
		ep.rndvMu.Unlock()
		if rs == nil {
			return
		}
		ep.finishRndv(rs)
	}
}

// Receiver side.

// deliverRTS handles an RTS: the message is matched now (and gets its
// CTS) or waits unexpected, as its header alone.
func (r *receiver) deliverRTS(ep *Endpoint, in *reliable.Incoming) fi.Errno {
	var rts wire.RTS
	if in.Op.Flags&(wire.OpFirst|wire.OpLast) != wire.OpFirst|wire.OpLast || rts.Parse(in.Payload) != nil {
		return fi.EINVAL
	}
	if rts.Len > MaxMsgSize {
		return fi.EMSGSIZE
	}
	r.mu.Lock()
	m := r.newMsg()
	r.newArrival(ep, m, in, int(rts.Len))
	m.rndv, m.handle, m.complete = true, rts.Handle, false
	if pr := r.findPosted(m); pr != nil && r.assign(m, pr) {
		d, fin, _ := r.acceptRndv(ep, m)
		r.mu.Unlock()
		ep.kickCtl()
		if fin {
			r.complete(&d)
		}
		return fi.SUCCESS
	}
	if r.unexpMsgs >= MaxUnexpectedMsgs {
		r.freeMsg(m)
		r.mu.Unlock()
		return fi.ENORX
	}
	m.unexp = true
	r.unexpQueue(m.tagged).push(m)
	r.unexpMsgs++
	r.mu.Unlock()
	return fi.SUCCESS
}

// acceptRndv queues the CTS of the matched (or, without a receive,
// discarded) rendezvous message m: what fits its receive, or nothing. A
// message with nothing to move finishes at once (fin). r.mu is held.
func (r *receiver) acceptRndv(ep *Endpoint, m *rxMsg) (d recvDone, fin, ok bool) {
	cts := wire.CTS{Handle: m.handle}
	if m.recv != nil && m.room > 0 {
		for {
			r.nextRid++
			if _, busy := r.rndv[r.nextRid]; r.nextRid != 0 && !busy {
				break
			}
		}
		m.rid = r.nextRid
		r.rndv[m.rid] = m
		cts.Recv, cts.Accept = m.rid, uint32(m.room)
	}
	cts.Put(m.cts[:])
	m.ctsOut = true
	ep.queueCtl(reliable.Request{Peer: m.peer, AuthKey: ep.replyDigest(m.from), Opcode: wire.OpMsg,
		Datatype: uint8(wire.MsgCTS), Payload: m.cts[:], Context: m})
	if cts.Accept > 0 {
		return d, false, true
	}
	if m.recv == nil { // discarded
		r.freeMsg(m)
		return d, false, true
	}
	m.complete = true
	return r.finish(m), true, true
}

// deliverData places pushed rendezvous data in its receive.
func (r *receiver) deliverData(ep *Endpoint, in *reliable.Incoming) fi.Errno {
	d := &in.Op
	rid, base := wire.SplitRndvKey(d.RKey)
	r.mu.Lock()
	m := r.rndv[rid]
	if m == nil || m.peer != in.Peer {
		r.mu.Unlock()
		return fi.ENOENT
	}
	if d.Addr > uint64(m.room) || int(base)+int(d.Addr)+len(in.Payload) > m.room {
		r.mu.Unlock()
		return fi.EINVAL
	}
	place(m, int(base)+int(d.Addr), in.Payload)
	m.got += len(in.Payload)
	if m.got < m.room {
		r.mu.Unlock()
		return fi.SUCCESS
	}
	delete(r.rndv, rid)
	m.complete = true
	done := r.finish(m)
	r.mu.Unlock()
	r.complete(&done)
	return fi.SUCCESS
}

// ctsDone is the engine's completion of a CTS we sent for m. A failed
// CTS fails the receive still waiting for its data.
func (r *receiver) ctsDone(m *rxMsg, err fi.Errno) {
	r.mu.Lock()
	m.ctsOut = false
	if r.closed {
		r.mu.Unlock()
		return
	}
	if m.finished {
		r.freeMsg(m)
		r.mu.Unlock()
		return
	}
	if err == fi.SUCCESS || r.rndv[m.rid] != m {
		r.mu.Unlock()
		return
	}
	delete(r.rndv, m.rid)
	d := r.finish(m)
	d.err, d.olen, d.len = err, 0, 0
	r.mu.Unlock()
	r.complete(&d)
}

// replyDigest is the auth key digest a request back to from presents.
func (ep *Endpoint) replyDigest(from fi.Addr) uint32 {
	if from != fi.AddrNotAvail {
		if _, keyH, ok := ep.av.AddrPortAuthKey(from); ok {
			if d, ok := ep.presentedDigest(ep.authKeys, keyH); ok {
				return d
			}
		}
	}
	return ep.dom.authDigest
}

// The control queue: requests the endpoint makes on its own (CTSs,
// pushes), sent in order as the engine takes them.

// queueCtl queues r; kickCtl submits. Any lock may be held.
func (ep *Endpoint) queueCtl(r reliable.Request) {
	ep.ctlMu.Lock()
	ep.ctl = append(ep.ctl, r)
	ep.ctlMu.Unlock()
	ep.ctlPending.Add(1)
}

// kickCtl submits queued control requests until the engine is full. A
// request the engine refuses for good completes with FI_ECANCELED. Called
// with none of the endpoint's locks held.
func (ep *Endpoint) kickCtl() {
	for ep.ctlPending.Load() > 0 {
		ep.ctlMu.Lock()
		if ep.ctlHead == len(ep.ctl) {
			ep.ctlMu.Unlock()
			return
		}
		r := &ep.ctl[ep.ctlHead]
		err := ep.eng.Submit(r)
		if errors.Is(err, fi.EAGAIN) {
			ep.ctlMu.Unlock()
			return // an engine completion kicks again
		}
		ctx := r.Context
		ep.ctl[ep.ctlHead] = reliable.Request{}
		ep.ctlHead++
		if ep.ctlHead == len(ep.ctl) {
			ep.ctl, ep.ctlHead = ep.ctl[:0], 0
		}
		ep.ctlPending.Add(-1)
		ep.ctlMu.Unlock()
		if err != nil {
			ep.onComplete(reliable.Completion{Context: ctx, Err: fi.ECANCELED})
		}
	}
}

// dropCtl cancels the queued control requests to peer (nil: all).
func (ep *Endpoint) dropCtl(peer *reliable.Peer) {
	for {
		var ctx any
		ep.ctlMu.Lock()
		for i := ep.ctlHead; i < len(ep.ctl); i++ {
			if peer == nil || ep.ctl[i].Peer == *peer {
				ctx = ep.ctl[i].Context
				ep.ctl = append(ep.ctl[:i], ep.ctl[i+1:]...)
				ep.ctlPending.Add(-1)
				break
			}
		}
		ep.ctlMu.Unlock()
		if ctx == nil {
			return
		}
		ep.onComplete(reliable.Completion{Context: ctx, Err: fi.ECANCELED})
	}
}

// EagerLimit is the endpoint's eager limit (FI_OPT_BUFFERED_LIMIT).
func (ep *Endpoint) EagerLimit() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.eagerLimit
}
