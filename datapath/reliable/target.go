package reliable

import (
	"net/netip"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// handleRequest is the target side for one decoded REQ. Receive goroutine only.
func (e *Engine) handleRequest(pk *wire.Packet, pkt *datapath.Packet) {
	if pk.DstEP != e.cfg.EndpointID {
		e.stats.drop(DropWrongEndpoint)
		return
	}
	W := uint32(e.cfg.Window)
	key := Peer{pkt.Addr, pk.SrcEP}
	rp := e.rxPeers[key]
	newSession := pk.Seq-1 < W // a session may start only in its first window
	if rp == nil {
		tb, buried := e.tombs[key]
		if !newSession || buried && tb.until > e.now() && tb.sessions.has(pk.Session) {
			e.stats.drop(DropStaleSession)
			return
		}
		if e.cfg.Admit != nil && !e.cfg.Admit(key, pkt.Meta) {
			e.stats.drop(DropUnknownSource)
			return
		}
		if len(e.rxPeers) >= e.cfg.MaxPeers && !e.evictIdlePeer() {
			e.stats.drop(DropPeerTableFull)
			return
		}
		rp = &rxPeer{peer: key, session: pk.Session, win: newReplayWindow(W, 1),
			held: make([]heldPkt, W), cache: make([]cachedResp, W)}
		if buried {
			rp.retired = tb.sessions
			delete(e.tombs, key)
		}
		e.rxPeers[key] = rp
	} else if rp.share.released && !e.claimShared(rp) {
		return
	}
	if pk.Session != rp.session {
		if !newSession || rp.retired.has(pk.Session) {
			e.stats.drop(DropStaleSession)
			return
		}
		// The initiator restarted (or timed us out): start over. The
		// session it left is retired: its late packets are stale.
		rp.retired.add(rp.session)
		rp.session = pk.Session
		rp.win.reset(1)
		for i := range rp.cache {
			rp.cache[i].valid = false
		}
		e.stats.sessionResets.Add(1)
	}
	rp.lastActive = e.now()
	if e.cfg.Shared != nil && e.cfg.Shared.Wants(pk) {
		e.offerShared(rp)
	}
	seq := pk.Seq
	switch rp.win.check(seq) {
	case replayNext:
		e.execute(rp, pk, pkt.Meta, false)
		for rp.win.advance() {
			h := &rp.held[rp.win.next&(W-1)]
			d := &e.rxDec2
			if err := wire.Decode(h.buf[:h.n], d); err != nil {
				// Unreachable (it decoded when held); never execute garbage.
				e.stats.drop(DropMalformed)
				continue
			}
			e.execute(rp, d, h.meta, true)
		}
	case replayAhead:
		h := &rp.held[seq&(W-1)]
		if h.buf == nil {
			h.buf = make([]byte, e.cfg.MaxPacket)
		}
		h.n = copy(h.buf, pkt.Buf)
		h.meta = pkt.Meta
		rp.win.hold(seq)
		e.stats.held.Add(1)
		e.wantAck(rp)
	case replayHeldDup:
		e.stats.drop(DropDuplicateHeld)
		e.wantAck(rp)
	case replayDelivered:
		c := &rp.cache[seq&(W-1)]
		if (!c.valid || c.seq != seq) && !e.fetchShared(rp, pk, c) {
			e.stats.drop(DropTooOld)
			return
		}
		e.stats.replayedFromCache.Add(1)
		e.sendCached(rp, c)
	case replayTooOld:
		e.stats.drop(DropTooOld)
	case replayTooFar:
		e.stats.drop(DropTooFar)
	}
}

// evictIdlePeer drops the target state of the peer idle the longest, if
// it has been idle longer than any initiator keeps retransmitting (twice
// the full retry budget), so no exactly-once guarantee is lost.
func (e *Engine) evictIdlePeer() bool {
	budget := int64(e.cfg.RetryMax) * int64(e.cfg.MaxRetries+1) * 2
	now := e.now()
	var victim *rxPeer
	for _, rp := range e.rxPeers {
		if rp.share.released { // the other executor may be serving it
			continue
		}
		if now-rp.lastActive > budget && (victim == nil || rp.lastActive < victim.lastActive) {
			victim = rp
		}
	}
	if victim == nil {
		return false
	}
	e.forgetShared(victim)
	delete(e.rxPeers, victim.peer)
	e.stats.peersEvicted.Add(1)
	return true
}

// execute hands the ops of the next in-order REQ to the handler and sends
// (and caches) the response.
func (e *Engine) execute(rp *rxPeer, pk *wire.Packet, meta datapath.Meta, held bool) {
	W := uint32(e.cfg.Window)
	c := &rp.cache[pk.Seq&(W-1)]
	if c.buf == nil {
		c.buf = make([]byte, e.cfg.MaxPacket)
	}
	// The entry's previous response may still be queued for sending: the
	// response to seq-Window, resent to a late duplicate, or one of a
	// session this request's reset retired (and invalidated) in the same
	// batch. It is sent before the buffer is rewritten, valid or not: a
	// queued packet owns its buffer until flushRx.
	for i := range e.rxOut {
		if &e.rxOut[i].Buf[0] == &c.buf[0] {
			e.flushRx()
			break
		}
	}
	b := &e.rxBld
	b.Reset(c.buf, wire.Header{Type: wire.TypeResp, SrcEP: e.cfg.EndpointID, DstEP: pk.SrcEP,
		AuthKey: pk.AuthKey, Session: pk.Session, Seq: pk.Seq})
	in := &e.rxIn
	for i := 0; i < int(pk.NumOps); i++ {
		d := &pk.Ops[i]
		resp, err := b.AddResp(wire.RespDesc{Opcode: d.Opcode, Len: d.RespLen})
		if err != nil {
			// A response that cannot fit (a peer not following the
			// protocol): NAK the op without executing it.
			resp, _ = b.AddResp(wire.RespDesc{Opcode: d.Opcode, Errno: uint32(fi.EMSGSIZE)})
			_ = resp
			continue
		}
		n, errno := 0, fi.EOPNOTSUPP
		if e.cfg.Handler != nil {
			*in = Incoming{Peer: rp.peer, AuthKey: pk.AuthKey, Meta: meta, Op: *d, Payload: pk.Payload(i)}
			n, errno = e.cfg.Handler.HandleRequest(in, resp)
			in.Payload = nil
		}
		if errno != fi.SUCCESS || n < 0 {
			n = 0
			if errno == fi.SUCCESS {
				errno = fi.EINVAL
			}
		}
		b.SetLastResult(min(n, len(resp)), uint32(errno))
	}
	e.stats.delivered.Add(1)
	out := b.Finish()
	if held {
		out[3] |= wire.HdrHeld
	}
	c.seq, c.valid, c.n = pk.Seq, true, len(out)
	// The ack state after this delivery.
	wire.PutAck(c.buf, rp.win.next+1, 0)
	e.queueRx(c.buf[:c.n], rp.peer.Addr)
}

// sendCached resends a cached response with the current ack state.
func (e *Engine) sendCached(rp *rxPeer, c *cachedResp) {
	wire.PutAck(c.buf, rp.win.next, rp.win.sack())
	e.queueRx(c.buf[:c.n], rp.peer.Addr)
}

func (e *Engine) wantAck(rp *rxPeer) {
	if !rp.needAck {
		rp.needAck = true
		e.rxAcks = append(e.rxAcks, rp)
	}
}

// sendAcks emits one ACK per peer that held or re-received out-of-order
// requests in this batch, so the initiator fast-retransmits the gap.
func (e *Engine) sendAcks() {
	for i, rp := range e.rxAcks {
		rp.needAck = false
		e.rxAcks[i] = nil
		if len(e.ackBuf)+wire.HeaderLen > cap(e.ackBuf) {
			e.flushRx()
			e.ackBuf = e.ackBuf[:0]
		}
		off := len(e.ackBuf)
		e.ackBuf = e.ackBuf[:off+wire.HeaderLen]
		pkt := wire.EncodeAck(e.ackBuf[off:], wire.Header{SrcEP: e.cfg.EndpointID, DstEP: rp.peer.EP,
			Session: rp.session, Ack: rp.win.next, Sack: rp.win.sack()})
		e.stats.acksSent.Add(1)
		e.queueRx(pkt, rp.peer.Addr)
	}
	e.rxAcks = e.rxAcks[:0]
}

// queueRx queues a target-side packet. Its buffer must stay unchanged
// until flushRx: execute flushes before it rewrites a queued cache entry.
func (e *Engine) queueRx(buf []byte, addr netip.AddrPort) {
	e.rxOut = append(e.rxOut, datapath.Packet{Buf: buf, Addr: addr})
	if len(e.rxOut) == cap(e.rxOut) {
		e.flushRx()
	}
}

func (e *Engine) flushRx() {
	if len(e.rxOut) > 0 {
		e.send(e.rxOut)
		e.rxOut = e.rxOut[:0]
	}
	e.ackBuf = e.ackBuf[:0]
}
