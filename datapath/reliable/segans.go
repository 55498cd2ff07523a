package reliable

import "github.com/xdpfab/xdpfab/datapath/wire"

// Answers held for a segmented operation: a request packet whose last
// op continues in the peer's next packet (its last descriptor lacks
// wire.OpLast: a 4 KiB write is three packets, the first two such) gets
// its simple response (simpleResponse) held rather than sent, and once
// the packet that ends the op has come, the end of its receive batch
// sends one ACK answering the whole run (wire.HdrAnswers), with the
// simple answers to the peer's next packets of that batch (consecutive,
// as gathering's runs, answers.go), so a segmented write costs one answer
// packet, not one per frame. Gathering does this when a receive batch
// holds whole ops; this does it when the frames arrive in batches of one,
// which is how a reader that receives as soon as it is woken meets them.
//
// Nothing about delivery changes: each request is executed and its
// response cached as always, so a lost ACK, or a hold that never ends,
// costs the initiator a retransmission answered from the cache, and a
// write completes only when the answer for its last packet arrives, as
// before. A hold ends early when the peer's next in-order request is not
// the continuation (another session, a held or failed one: its answer
// goes first), when it is older than Config.MoreHold at a batch's end
// (the frames of one op leave the initiator in one transport send, so
// the rest is microseconds behind unless it was lost or the initiator's
// window closed mid-op), when a receive is about to block, and otherwise
// by the engine's next timer run (within RetryInitial, or at a
// retransmission deadline already set: the initiator's own timeout is
// the last resort, and costs only a replay from the cache).

// heldAnswers is the run of responses held for a peer: session, last
// sequence number answered, how many up to it, the requests' auth key;
// mid: the last one's op continues in the next packet; listed: rp is in
// Engine.ansPeers.
type heldAnswers struct {
	session, last, authKey uint32
	n                      uint16
	mid, listed            bool
}

// answerInOrder queues the response out to in-order request pk of rp, or
// holds it as described above. rxMu is held.
func (e *Engine) answerInOrder(rp *rxPeer, pk *wire.Packet, out []byte) {
	h := &rp.ans
	simple := simpleResponse(out) // not a held request's, nor a retransmission's
	if h.n > 0 && (!simple || h.session != pk.Session || h.last+1 != pk.Seq || h.n == maxAnswers) {
		e.sendHeldAnswers(rp)
	}
	more := pk.NumOps > 0 && pk.Ops[pk.NumOps-1].Flags&wire.OpLast == 0
	if !simple || h.n == 0 && !more {
		e.queueRx(out, rp.peer.Addr)
		return
	}
	if h.n == 0 {
		h.session, h.authKey = pk.Session, pk.AuthKey
		if len(e.ansPeers) == 0 {
			e.ansSince = e.now()
		}
		if !h.listed {
			h.listed = true
			e.ansPeers = append(e.ansPeers, rp)
		}
	}
	h.last = pk.Seq
	h.n++
	h.mid = more
}

// sendHeldAnswers queues rp's held run as one ACK; a run of one (its op's
// next packet did not come in time) as the cached response it held,
// which says the same in the form the initiator would have had without
// holding. rp stays listed in ansPeers until releaseAnswers. rxMu is held.
func (e *Engine) sendHeldAnswers(rp *rxPeer) {
	h := &rp.ans
	switch {
	case h.n == 0:
		return
	case h.n == 1:
		h.n = 0
		// Not cached any more, or the session is over: the initiator
		// had it (replayed) or no longer asks.
		if i := e.store.findResp(rp, h.last); i >= 0 && h.session == rp.session {
			en := &e.store.ents[i]
			e.queueRx(en.buf[:en.n], rp.peer.Addr)
		}
		return
	}
	// The ack state right after the run's last request: what its own
	// response would have said (a later, stale one is harmless).
	pkt := wire.EncodeAnswersAck(e.rxScratch(wire.HeaderLen), wire.Header{SrcEP: e.cfg.EndpointID,
		DstEP: rp.peer.EP, AuthKey: h.authKey}, h.session, h.last, h.last+1, 0, h.n)
	e.stats.answersSent.Add(uint64(h.n))
	h.n = 0
	e.queueRx(pkt, rp.peer.Addr)
}

// releaseAnswers sends every held run and empties ansPeers. rxMu is held.
func (e *Engine) releaseAnswers() {
	for i, rp := range e.ansPeers {
		e.sendHeldAnswers(rp)
		rp.ans.listed = false
		e.ansPeers[i] = nil
	}
	e.ansPeers = e.ansPeers[:0]
}

// sendEndedRuns sends the held runs whose last op ended (they waited
// only for the batch's end, taking in the answers to the peer's next
// packets of the batch too) and reports whether a run is still held for
// the rest of an op. rxMu is held.
func (e *Engine) sendEndedRuns() bool {
	mid := false
	for _, rp := range e.ansPeers {
		if rp.ans.n > 0 && !rp.ans.mid {
			e.sendHeldAnswers(rp)
		}
		mid = mid || rp.ans.n > 0
	}
	return mid
}

// endAnswerBatch ends a receive batch's part in holding answers: runs
// whose op ended go out, the others once the oldest run is older than
// MoreHold (one clock for all peers), and while any is held the engine's
// timer is due (within RetryInitial, or at a retransmission deadline
// already set), so a receive side that stops running still answers
// (runTimers). rxMu is held.
func (e *Engine) endAnswerBatch() {
	if len(e.ansPeers) == 0 {
		return
	}
	// Peers handed to the other executor (Config.Shared) take their
	// answers along: what it answers next must follow them (deferRx).
	if !e.sendEndedRuns() || len(e.rxOffer) > 0 || e.now()-e.ansSince > int64(e.cfg.MoreHold) {
		e.releaseAnswers() // ansHeld stays: the timer clears it, not each write
		return
	}
	if !e.ansHeld.Load() {
		e.ansHeld.Store(true)
		e.mu.Lock()
		if !e.timerArm {
			// Else the timer runs at its deadline anyway (a packet's
			// retransmission timeout): no wake-up of its own per write.
			e.armTimer(e.now() + int64(e.cfg.RetryInitial))
		}
		e.mu.Unlock()
	}
}
