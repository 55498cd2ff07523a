package reliable

// replayWindow is the target's per-peer duplicate filter and reorder
// tracker, in the style of wireguard-go's replay.Filter but combined with
// in-order delivery: next is the lowest sequence number not yet delivered
// to the handler, and a ring bitmap marks the requests in
// [next, next+size) that arrived early and are held. Everything below next
// was delivered exactly once. Sequence numbers are 32-bit serial numbers.
type replayWindow struct {
	next uint32
	size uint32 // power of two
	// nheld counts the bits set in held: while it is 0 (requests arriving
	// in order) no method reads the bitmap, which with thousands of peers
	// is one more cold line of the peer's state a request would touch.
	nheld uint32
	held  []uint64 // bit (seq % size) set = seq held, for seq in [next, next+size)
}

type replayVerdict uint8

const (
	replayNext      replayVerdict = iota // seq == next: deliver now
	replayAhead                          // within the window, new: hold it
	replayHeldDup                        // within the window, already held
	replayDelivered                      // delivered within the last size seqs: answer from the response cache
	replayTooOld                         // delivered longer ago than the cache remembers
	replayTooFar                         // beyond the window
)

func newReplayWindow(size uint32, next uint32) replayWindow {
	return newReplayWindowIn(size, next, nil)
}

// newReplayWindowIn keeps the bitmap in room when it fits (an array in
// the state that owns the window: every request reads the bitmap, and
// with thousands of peers a bitmap of its own is one more cache miss).
func newReplayWindowIn(size, next uint32, room []uint64) replayWindow {
	n := (size + 63) / 64
	if int(n) > len(room) {
		room = make([]uint64, n)
	}
	return replayWindow{next: next, size: size, held: room[:n:n]}
}

func (w *replayWindow) reset(next uint32) {
	w.next = next
	w.nheld = 0
	clear(w.held)
}

func (w *replayWindow) bit(seq uint32) (int, uint64) {
	i := seq & (w.size - 1)
	return int(i / 64), 1 << (i % 64)
}

// check classifies seq without changing the window.
func (w *replayWindow) check(seq uint32) replayVerdict {
	d := seq - w.next
	switch {
	case d == 0:
		return replayNext
	case int32(d) < 0:
		if uint32(-int32(d)) <= w.size {
			return replayDelivered
		}
		return replayTooOld
	case d >= w.size:
		return replayTooFar
	case w.nheld == 0:
		return replayAhead
	}
	i, m := w.bit(seq)
	if w.held[i]&m != 0 {
		return replayHeldDup
	}
	return replayAhead
}

// hold marks seq (which check called replayAhead) as held.
func (w *replayWindow) hold(seq uint32) {
	i, m := w.bit(seq)
	if w.held[i]&m == 0 {
		w.nheld++
	}
	w.held[i] |= m
}

// advance records delivery of next and reports whether the new next is
// already held (so the caller delivers it too).
func (w *replayWindow) advance() bool {
	if w.nheld == 0 {
		w.next++
		return false
	}
	i, m := w.bit(w.next)
	if w.held[i]&m != 0 {
		w.held[i] &^= m
		w.nheld--
	}
	w.next++
	return w.nextHeld()
}

// sack returns the selective-ack bitmap: bit k set = next+1+k is held.
func (w *replayWindow) sack() uint64 {
	var s uint64
	if w.nheld == 0 {
		return 0
	}
	lim := w.size - 1
	if lim > 64 {
		lim = 64
	}
	for k := uint32(0); k < lim; k++ {
		i, m := w.bit(w.next + 1 + k)
		if w.held[i]&m != 0 {
			s |= 1 << k
		}
	}
	return s
}

// nextHeld reports whether next, the request to deliver now, is held.
func (w *replayWindow) nextHeld() bool {
	if w.nheld == 0 {
		return false
	}
	i, m := w.bit(w.next)
	return w.held[i]&m != 0
}

// anyHeld reports whether a request is held out of order.
func (w *replayWindow) anyHeld() bool { return w.nheld != 0 }
