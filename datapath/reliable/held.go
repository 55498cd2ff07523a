package reliable

// Held requests and waiting readers. Coalescing (Config.CoalesceAt)
// leaves requests queued for the next response, which packs them
// together, or for MoreHold. That pays while the application keeps
// submitting; once a reader waits for completions nothing more is coming
// from it before one, and the held requests only delay the completions it
// waits for: a window of 4 KiB writes (fi_rma_bw) sent its first write and
// held the other 63 until the first answer or MoreHold, while the
// application sat in fi_cq_sread. A reader that assists the engine (Assist,
// Poll) or drives it (Progress) therefore sends what coalescing holds at
// once, all of it in one transport send (as TCP's autocork sends when the
// writer stops). Requests held by FI_MORE stay held: the application said
// more is coming.
//
// The reverse holds too: a response that completed several ops of a peer
// (refillAt) hands the application completions it will repost, and until
// a reader comes back Submit leaves that peer's requests queued as
// coalescing does, also with fewer than CoalesceAt packets in flight.
// Without it a pipelined application whose whole window came back at once
// (on veth the target answers inside the initiator's own sendto) sent the
// first two requests of every refill alone, each paying a packet's
// transport and target costs: 6 packets per 64 fetch-adds instead of 4.
// The reader's next CQ read sends the refill in full packets; MoreHold
// bounds the wait of one that never reads again. Only where readers come
// back (readerReturns): an engine whose completions go to OnComplete
// with nobody assisting would hold every refill for MoreHold. A thread
// that posts while another sleeps in a blocking read of completions that
// are not coming can still wait up to MoreHold (the timer sends them).

// refillAt is how many ops one response must complete for the requests
// submitted after it to be held until a reader comes back: one completion
// (a ping-pong) is answered at once.
const refillAt = 2

// sendHeld sends the requests coalescing holds to every peer. A load when
// nothing is held; otherwise mu is taken (not with rxMu: flushLocked
// only tries it).
func (e *Engine) sendHeld() {
	if !e.held.Load() {
		return
	}
	e.mu.Lock()
	e.held.Store(false)
	e.heldPass++ // ends every peer's refill hold
	if !e.closed {
		for _, p := range e.active {
			if p.heldFrom != 0 {
				e.pump(p)
			}
		}
		e.flushLocked()
	}
	e.mu.Unlock()
}

// readerReturns reports whether a reader will come back to send what a
// refill hold leaves queued: under manual progress every completion is
// read by one, and under auto progress a reader is assisting now or
// assisted within MoreHold. e.mu is held; now is e.now().
func (e *Engine) readerReturns(now int64) bool {
	return e.cfg.ManualProgress || e.assisters.Load() > 0 || now-e.lastAssist.Load() < int64(e.cfg.MoreHold)
}
