package reliable

import "github.com/xdpfab/xdpfab/datapath"

// rxStore is what the target keeps of its peers' packets between batches:
// the responses of delivered requests the initiator may still ask for
// again, and requests that arrived ahead of a missing one and wait to be
// delivered in order. Each sits in a buffer of its own size (a fetch-add
// response takes a 64-byte buffer) from one pool shared by every peer of
// the endpoint, bounded by Config.CacheBytes, so a peer costs what it has
// in flight, not a Window of MaxPacket buffers.
//
// A peer's entries form two lists in sequence order (rxPeer.cache and
// rxPeer.held); cached responses also form one age list across peers,
// least recently stored or asked for first, for the age-based release (see
// the package doc, "Memory").
//
// Confined to the receive side (rxMu), like the rest of the target state.
type rxStore struct {
	pool *bufPool
	ents []rxEntry
	// metas are held requests' Meta, by entry (out of rxEntry, which
	// they would push past one line).
	metas []datapath.Meta
	free  []int32 // unused entries
	// age: cached responses in the order they were stored.
	age entList
	// heldBytes counts the pool bytes held requests take; they may take at
	// most heldLimit, so out-of-order arrivals never crowd out responses.
	heldBytes, heldLimit int
	// later are buffers released while a packet queued for sending may
	// still point at them: they go back to the pool at flushRx.
	later [][]byte
}

// rxEntry is one cached response or held request, one cache line
// (TestRxEntryLayout): with thousands of peers a request releases its
// peer's previous response, stored thousands of requests ago, and links
// the next oldest on the age list, both out of cache. A held request's
// Meta is in rxStore.metas; whether an entry is a held request its
// caller knows (the list it is on).
type rxEntry struct {
	buf  []byte // the pool's buffer, whole
	n    int32  // packet bytes in buf
	seq  uint32
	at   int64 // engine clock when stored
	peer *rxPeer
	// prev, next link the peer's list; aprev, anext the age list.
	prev, next   int32
	aprev, anext int32
}

// entList is a doubly linked list of entries by index; -1 ends it.
type entList struct{ head, tail int32 }

var noEntries = entList{-1, -1}

func newRxStore(limit, maxPacket int) *rxStore {
	return &rxStore{pool: newBufPool(limit, max(limit/16, 4*maxPacket)), age: noEntries, heldLimit: limit / 2}
}

// alloc returns an unlinked entry with a buffer of at least n bytes, or -1
// when the budget does not allow it.
func (s *rxStore) alloc(n int) int32 {
	buf, ok := s.pool.get(n)
	if !ok {
		return -1
	}
	var i int32
	if k := len(s.free); k > 0 {
		i = s.free[k-1]
		s.free = s.free[:k-1]
	} else {
		s.ents = append(s.ents, rxEntry{})
		s.metas = append(s.metas, datapath.Meta{})
		i = int32(len(s.ents) - 1)
	}
	s.ents[i] = rxEntry{buf: buf, prev: -1, next: -1, aprev: -1, anext: -1}
	return i
}

// release frees entry i, which must be unlinked; held: it was a held
// request. Its buffer goes back to the pool at the next flushRx when it
// may be queued for sending.
func (s *rxStore) release(i int32, queued, held bool) {
	en := &s.ents[i]
	if held {
		s.heldBytes -= cap(en.buf)
		s.metas[i] = datapath.Meta{}
	}
	if queued {
		s.later = append(s.later, en.buf)
	} else {
		s.pool.put(en.buf)
	}
	*en = rxEntry{}
	s.free = append(s.free, i)
}

// flushed returns the buffers released while queued: the packets that
// pointed at them have been sent.
func (s *rxStore) flushed() {
	for i, b := range s.later {
		s.pool.put(b)
		s.later[i] = nil
	}
	s.later = s.later[:0]
}

// pushBack links i at the tail of l (the peer's lists are appended in
// sequence order).
func (s *rxStore) pushBack(l *entList, i int32) {
	en := &s.ents[i]
	en.prev, en.next = l.tail, -1
	if l.tail >= 0 {
		s.ents[l.tail].next = i
	} else {
		l.head = i
	}
	l.tail = i
}

// unlink removes i from l.
func (s *rxStore) unlink(l *entList, i int32) {
	en := &s.ents[i]
	if en.prev >= 0 {
		s.ents[en.prev].next = en.next
	} else {
		l.head = en.next
	}
	if en.next >= 0 {
		s.ents[en.next].prev = en.prev
	} else {
		l.tail = en.prev
	}
	en.prev, en.next = -1, -1
}

func (s *rxStore) ageUnlink(i int32) {
	en := &s.ents[i]
	if en.aprev >= 0 {
		s.ents[en.aprev].anext = en.anext
	} else {
		s.age.head = en.anext
	}
	if en.anext >= 0 {
		s.ents[en.anext].aprev = en.aprev
	} else {
		s.age.tail = en.aprev
	}
	en.aprev, en.anext = -1, -1
}

// cacheResp records entry i, holding the response to rp's request seq, at
// the tail of rp's cache (responses are made in sequence order) and of the
// age list.
func (s *rxStore) cacheResp(rp *rxPeer, i int32, seq uint32, n int, now int64) {
	en := &s.ents[i]
	en.seq, en.n, en.at, en.peer = seq, int32(n), now, rp
	s.pushBack(&rp.cache, i)
	s.agePush(i)
}

// agePush appends entry i, not on the age list, at its tail (youngest).
func (s *rxStore) agePush(i int32) {
	en := &s.ents[i]
	en.aprev, en.anext = s.age.tail, -1
	if s.age.tail >= 0 {
		s.ents[s.age.tail].anext = i
	} else {
		s.age.head = i
	}
	s.age.tail = i
}

// touch restarts cached response i's age: it moves to the tail of the age
// list, stamped now. A response its initiator keeps asking for (its
// answers lost) is thus released by age only a whole retry budget after
// the last time it was asked for, when that initiator has given up.
func (s *rxStore) touch(i int32, now int64) {
	en := &s.ents[i]
	en.at = now
	if s.age.tail == i {
		return
	}
	s.ageUnlink(i)
	s.agePush(i)
}

// findResp returns the entry caching rp's response to seq, or -1. The
// cache holds only what the initiator has not acknowledged, at most a
// window of entries; duplicates are of the oldest, found near the head.
func (s *rxStore) findResp(rp *rxPeer, seq uint32) int32 {
	for i := rp.cache.head; i >= 0; i = s.ents[i].next {
		switch d := int32(s.ents[i].seq - seq); {
		case d == 0:
			return i
		case d > 0:
			return -1
		}
	}
	return -1
}

// dropResp unlinks and releases cached response i.
func (s *rxStore) dropResp(i int32, queued bool) {
	en := &s.ents[i]
	s.unlink(&en.peer.cache, i)
	s.ageUnlink(i)
	s.release(i, queued, false)
}

// ackResps releases rp's cached responses below ack: the initiator has
// them all (a request's Ack is its lowest unanswered sequence number).
func (s *rxStore) ackResps(rp *rxPeer, ack uint32) {
	for i := rp.cache.head; i >= 0 && int32(s.ents[i].seq-ack) < 0; i = rp.cache.head {
		s.dropResp(i, true)
	}
}

// hold records entry i (a copy of rp's request seq) in rp's held list,
// kept in sequence order.
func (s *rxStore) hold(rp *rxPeer, i int32, seq uint32, n int, meta datapath.Meta, now int64) {
	en := &s.ents[i]
	en.seq, en.n, en.at, en.peer = seq, int32(n), now, rp
	s.metas[i] = meta
	s.heldBytes += cap(en.buf)
	at := rp.held.tail
	for at >= 0 && int32(s.ents[at].seq-seq) > 0 {
		at = s.ents[at].prev
	}
	if at == rp.held.tail {
		s.pushBack(&rp.held, i)
		return
	}
	// Insert after at (or at the head when at is -1).
	var nx int32
	if at >= 0 {
		nx = s.ents[at].next
		s.ents[at].next = i
	} else {
		nx = rp.held.head
		rp.held.head = i
	}
	en.prev, en.next = at, nx
	s.ents[nx].prev = i
}

// canHold reports whether a held request of n bytes fits the held share.
func (s *rxStore) canHold(n int) bool {
	return s.heldBytes+classSize(classOf(n)) <= s.heldLimit && s.pool.fits(n)
}

// dropPeer releases everything stored for rp.
func (s *rxStore) dropPeer(rp *rxPeer) {
	for i := rp.cache.head; i >= 0; i = rp.cache.head {
		s.dropResp(i, true)
	}
	for i := rp.held.head; i >= 0; i = rp.held.head {
		s.unlink(&rp.held, i)
		s.release(i, false, true)
	}
}

// expire releases cached responses stored before the engine-clock time
// before, oldest first, at most max of them; it returns how many.
func (s *rxStore) expire(before int64, max int) int {
	k := 0
	for i := s.age.head; i >= 0 && k < max && s.ents[i].at < before; i = s.age.head {
		s.dropResp(i, true)
		k++
	}
	return k
}
