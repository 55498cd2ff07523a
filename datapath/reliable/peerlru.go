package reliable

// peerLRU orders the target's peer states by activity, most recent first,
// so the peer limit finds the one idle longest in constant time instead
// of scanning thousands of peers. The order lags activity by up to
// Engine.lruLag (a request moves its state only if it was moved longer
// ago); eviction requeues the tail states active since their last move
// (evictIdlePeer). Receive side only.
type peerLRU struct {
	head, tail *rxPeer
}

func (l *peerLRU) pushFront(rp *rxPeer) {
	rp.lruPrev, rp.lruNext = nil, l.head
	if l.head != nil {
		l.head.lruPrev = rp
	} else {
		l.tail = rp
	}
	l.head = rp
}

func (l *peerLRU) remove(rp *rxPeer) {
	if rp.lruPrev != nil {
		rp.lruPrev.lruNext = rp.lruNext
	} else {
		l.head = rp.lruNext
	}
	if rp.lruNext != nil {
		rp.lruNext.lruPrev = rp.lruPrev
	} else {
		l.tail = rp.lruPrev
	}
	rp.lruPrev, rp.lruNext = nil, nil
}

// touch moves rp to the front.
func (l *peerLRU) touch(rp *rxPeer) {
	if l.head != rp {
		l.remove(rp)
		l.pushFront(rp)
	}
}
