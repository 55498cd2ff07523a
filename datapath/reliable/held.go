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

// sendHeld sends the requests coalescing holds to every peer. A load when
// nothing is held; otherwise mu is taken (not with rxMu: flushLocked
// only tries it).
func (e *Engine) sendHeld() {
	if !e.held.Load() {
		return
	}
	e.mu.Lock()
	e.held.Store(false)
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
