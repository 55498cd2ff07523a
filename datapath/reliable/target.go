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
	rp := e.rxPeers.get(key)
	newSession := pk.Seq-1 < W // a session may start only in its first window
	now := e.rxNow
	if rp == nil {
		tb, buried := e.tombs[key]
		if !newSession || buried && tb.until > now && tb.sessions.has(pk.Session) {
			e.stats.drop(DropStaleSession)
			return
		}
		if e.cfg.Admit != nil && !e.cfg.Admit(key, pkt.Meta) {
			e.stats.drop(DropUnknownSource)
			return
		}
		if e.rxPeers.len() >= e.cfg.MaxPeers && !e.evictIdlePeer(now) {
			e.stats.drop(DropPeerTableFull)
			return
		}
		rp = &rxPeer{peer: key, session: pk.Session, acked: 1, cache: noEntries, held: noEntries}
		rp.win = newReplayWindowIn(W, 1, rp.winBits[:])
		if buried {
			rp.retired = tb.sessions
			delete(e.tombs, key)
		}
		e.rxPeers.put(rp)
		rp.lruAt = now
		e.rxLRU.pushFront(rp)
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
		rp.acked = 1
		e.store.dropPeer(rp)
		e.stats.sessionResets.Add(1)
	}
	rp.lastActive = now
	if now-rp.lruAt > e.lruLag() {
		rp.lruAt = now
		e.rxLRU.touch(rp)
	}
	// The initiator has the responses to everything below the request's
	// Ack (its lowest unanswered sequence number): release them.
	if ack := pk.Ack; int32(ack-rp.acked) > 0 && int32(ack-rp.win.next) <= 0 {
		rp.acked = ack
		e.store.ackResps(rp, ack)
	}
	if e.cfg.Shared != nil && e.cfg.Shared.Wants(pk) {
		e.offerShared(rp)
	}
	seq := pk.Seq
	switch rp.win.check(seq) {
	case replayNext:
		if !e.execute(rp, pk, pkt.Meta, false) {
			e.stats.drop(DropCacheFull) // not executed: its retransmission tries again
			return
		}
		rp.win.advance()
		e.deliverHeld(rp)
	case replayAhead:
		i := int32(-1)
		if e.store.canHold(len(pkt.Buf)) {
			i = e.store.alloc(len(pkt.Buf))
		}
		if i < 0 {
			e.stats.drop(DropCacheFull) // as if lost: it is sent again
			return
		}
		n := copy(e.store.ents[i].buf, pkt.Buf)
		e.store.hold(rp, i, seq, n, pkt.Meta, now)
		rp.win.hold(seq)
		e.stats.held.Add(1)
		e.wantAck(rp)
	case replayHeldDup:
		e.stats.drop(DropDuplicateHeld)
		e.wantAck(rp)
		e.deliverHeld(rp) // it may wait for room in the cache
	case replayDelivered:
		if i := e.store.findResp(rp, seq); i >= 0 {
			e.stats.replayedFromCache.Add(1)
			e.sendCached(rp, i)
		} else if int32(seq-rp.acked) < 0 {
			e.stats.drop(DropTooOld) // the initiator has its response: a late duplicate
		} else if e.fetchShared(rp, pk) {
			e.stats.replayedFromCache.Add(1) // delivered by the other executor, answered with its values
		} else {
			// Executed, and its response released before the initiator
			// had it (budget pressure or age), or delivered by the other
			// executor, which no longer knows it: never execute it
			// again; say so.
			e.stats.responsesLost.Add(1)
			e.sendLost(rp, pk)
		}
	case replayTooOld:
		e.stats.drop(DropTooOld)
	case replayTooFar:
		e.stats.drop(DropTooFar)
	}
}

// deliverHeld delivers rp's held requests that are next in order, until
// one is missing or the cache has no room for its response (it stays held
// and is tried again with the peer's next packet).
func (e *Engine) deliverHeld(rp *rxPeer) {
	st := e.store
	for {
		// Held copies the window has passed: a retransmission of a held
		// request was delivered in its place.
		for i := rp.held.head; i >= 0 && int32(st.ents[i].seq-rp.win.next) < 0; i = rp.held.head {
			st.unlink(&rp.held, i)
			st.release(i, false, true)
		}
		i := rp.held.head
		if i < 0 || !rp.win.nextHeld() {
			return
		}
		en := &st.ents[i]
		if en.seq != rp.win.next {
			return // unreachable: the window and the list agree
		}
		meta := st.metas[i]
		d := &e.rxDec2
		if err := wire.Decode(en.buf[:en.n], d); err != nil {
			// Unreachable (it decoded when held); never execute garbage.
			e.stats.drop(DropMalformed)
		} else if !e.execute(rp, d, meta, true) { // may grow st.ents: en is stale now
			e.stats.drop(DropCacheFull)
			return
		}
		rp.win.advance()
		st.unlink(&rp.held, i)
		st.release(i, false, true)
	}
}

// evictIdlePeer drops the target state of the peer idle the longest, if
// it has been idle longer than any initiator keeps retransmitting (twice
// the full retry budget), so no exactly-once guarantee is lost. The list
// is ordered by when states last moved to its front (lruAt), which lags
// their activity by up to lruLag: a state at the tail that was active
// since it moved goes back to the front, at most maxRequeue of them per
// call (each one a move that its requests did not make), and the new
// source is dropped for now if no idle state came up (it retransmits).
func (e *Engine) evictIdlePeer(now int64) bool {
	idle := 2 * e.retryBudget()
	victim := e.rxLRU.tail
	for requeued := 0; victim != nil; {
		if victim.share.released { // the other executor may be serving it
			victim = victim.lruPrev
			continue
		}
		if now-victim.lastActive > idle {
			e.dropRxPeer(victim)
			e.stats.peersEvicted.Add(1)
			return true
		}
		if victim.lruAt == victim.lastActive || requeued == maxRequeue {
			return false // the least recently active state is not idle enough
		}
		prev := victim.lruPrev
		victim.lruAt = victim.lastActive
		e.rxLRU.touch(victim)
		requeued++
		victim = prev
	}
	return false
}

// maxRequeue bounds evictIdlePeer's work per new source.
const maxRequeue = 16

// lruLag is how long a state's place in Engine.rxLRU may lag its
// activity: a request moves its state to the front only if it was moved
// longer ago than this, so with thousands of peers a request does not
// write the two list neighbours of its state (two more cache misses).
// Far below the idle time eviction needs (twice the retry budget).
func (e *Engine) lruLag() int64 { return e.retryBudget() / 8 }

// dropRxPeer removes rp's target state and releases what it stored.
func (e *Engine) dropRxPeer(rp *rxPeer) {
	e.forgetShared(rp)
	e.store.dropPeer(rp)
	e.rxLRU.remove(rp)
	e.rxPeers.remove(rp)
}

// retryBudget is the longest an initiator keeps retransmitting one packet
// (engine-clock ns): every timeout at most RetryMax.
func (e *Engine) retryBudget() int64 {
	return int64(e.cfg.RetryMax) * int64(e.cfg.MaxRetries+1)
}

// cacheAlloc returns an entry for a response of n bytes, or -1 when the
// budget has no room: back-pressure, the request is not executed. Nothing
// the initiators may still ask for is evicted to make room: what the cache
// holds is exactly the responses not yet acknowledged (a request's Ack
// releases everything below it, ackResps), and an initiator whose
// response was lost, and whose retransmissions keep getting lost too, may
// ask for it far later than RetryMax (heavy loss can take the response
// and several retransmissions' answers in a row; a loaded machine delays
// the initiator's timers).
// Room comes back as the initiators acknowledge (every request they send,
// the retransmission of this very request too, carries their Ack) and as
// responses nobody asked for in a whole retry budget age out
// (progressLocked).
func (e *Engine) cacheAlloc(n int) int32 {
	st := e.store
	if i := st.alloc(n); i >= 0 {
		return i
	}
	if len(st.later) > 0 {
		e.flushRx() // buffers released while queued come back now
	}
	return st.alloc(n)
}

// execute hands the ops of the next in-order REQ to the handler and sends
// (and caches) the response. It reports false, having executed nothing,
// when the response cache has no room for the response.
func (e *Engine) execute(rp *rxPeer, pk *wire.Packet, meta datapath.Meta, held bool) bool {
	size := wire.HeaderLen + int(pk.NumOps)*wire.RespDescLen
	for i := 0; i < int(pk.NumOps); i++ {
		size += int(pk.Ops[i].RespLen) // each below 64 KiB, 16 at most
	}
	size = min(size, e.cfg.MaxPacket)
	ci := e.cacheAlloc(size)
	if ci < 0 {
		return false
	}
	buf := e.store.ents[ci].buf[:size:size]
	b := &e.rxBld
	b.Reset(buf, wire.Header{Type: wire.TypeResp, SrcEP: e.cfg.EndpointID, DstEP: pk.SrcEP,
		AuthKey: pk.AuthKey, Session: pk.Session, Seq: pk.Seq})
	in := &e.rxIn
	for i := 0; i < int(pk.NumOps); i++ {
		d := &pk.Ops[i]
		if d.Opcode == wire.OpMsg && !e.rxMsgs {
			e.rxMsgs = true
			e.rxHold.Store(true)
		}
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
	switch {
	case held:
		out[3] |= wire.HdrHeld
	case pk.Flags&wire.HdrRetransmit == 0:
		out[3] |= wire.HdrOriginal // until it is replayed (sendCached)
	}
	// The ack state after this delivery.
	wire.PutAck(out, rp.win.next+1, 0)
	e.store.cacheResp(rp, ci, pk.Seq, len(out), e.rxNow)
	e.queueRx(out, rp.peer.Addr)
	return true
}

// sendCached resends cached response i with the current ack state. The
// initiator is still asking for it: its age starts over (rxStore.touch).
func (e *Engine) sendCached(rp *rxPeer, i int32) {
	e.store.touch(i, e.now())
	en := &e.store.ents[i]
	// A replay answers a retransmission (or a duplicate), not the first
	// transmission: it must not tell the initiator that its timeout was
	// spurious. The first sending may still be queued in rxOut with the
	// same bytes; it then goes without the mark too, which only forgoes a
	// detection.
	en.buf[3] &^= wire.HdrOriginal
	wire.PutAck(en.buf, rp.win.next, rp.win.sack())
	e.queueRx(en.buf[:en.n], rp.peer.Addr)
}

// sendLost answers pk, a retransmission of a request delivered before
// whose response is no longer cached, with the response-lost status
// (wire.HdrLost, every op FI_ENODATA): the initiator completes its ops
// with FI_ENODATA instead of retrying one that must not run again.
func (e *Engine) sendLost(rp *rxPeer, pk *wire.Packet) {
	b := &e.rxBld
	b.Reset(e.rxScratch(wire.HeaderLen+int(pk.NumOps)*wire.RespDescLen), wire.Header{Type: wire.TypeResp,
		Flags: wire.HdrLost, SrcEP: e.cfg.EndpointID, DstEP: pk.SrcEP, AuthKey: pk.AuthKey,
		Session: pk.Session, Seq: pk.Seq, Ack: rp.win.next, Sack: rp.win.sack()})
	for i := 0; i < int(pk.NumOps); i++ {
		_, _ = b.AddResp(wire.RespDesc{Opcode: pk.Ops[i].Opcode, Errno: uint32(fi.ENODATA)}) // sized to fit
	}
	e.queueRx(b.Finish(), rp.peer.Addr)
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
		pkt := wire.EncodeAck(e.rxScratch(wire.HeaderLen), wire.Header{SrcEP: e.cfg.EndpointID, DstEP: rp.peer.EP,
			Session: rp.session, Ack: rp.win.next, Sack: rp.win.sack()})
		e.stats.acksSent.Add(1)
		e.queueRx(pkt, rp.peer.Addr)
	}
	e.rxAcks = e.rxAcks[:0]
}

// rxScratch returns n bytes (at most a header and 16 response
// descriptors) for a target-side packet that is not cached: acks and
// response-lost answers. They stay valid until flushRx.
func (e *Engine) rxScratch(n int) []byte {
	if len(e.ackBuf)+n > cap(e.ackBuf) {
		e.flushRx()
	}
	off := len(e.ackBuf)
	e.ackBuf = e.ackBuf[:off+n]
	return e.ackBuf[off : off+n : off+n]
}

// queueRx queues a target-side packet. Its buffer must stay unchanged
// until flushRx: buffers released meanwhile go back to the pool only then.
func (e *Engine) queueRx(buf []byte, addr netip.AddrPort) {
	e.rxOut = append(e.rxOut, datapath.Packet{Buf: buf, Addr: addr})
	if len(e.rxOut) == cap(e.rxOut) {
		e.flushRx()
	}
}

func (e *Engine) flushRx() {
	e.rxDeferred.Store(false)
	if len(e.rxOut) > 0 {
		e.gatherAnswers()
		e.send(e.rxOut)
		clear(e.rxOut)
		e.rxOut = e.rxOut[:0]
	}
	e.ackBuf = e.ackBuf[:0]
	e.ansBuf = e.ansBuf[:0]
	e.store.flushed()
}
