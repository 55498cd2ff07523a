package fabric

import "github.com/xdpfab/xdpfab/fi"

// Matching (fi_msg(3), fi_tagged(3)). A receiver keeps four FIFOs: posted
// untagged receives, posted tagged receives, and the unexpected messages
// of each kind (arrived before a receive that takes them). Tagged and
// untagged traffic never meet. An arriving message takes the oldest posted
// receive of its kind that accepts it; a receive being posted takes the
// oldest unexpected message it accepts. A peer's messages arrive in its
// send order (the datapath delivers each peer's requests in order and a
// message is matched when its first segment, or its RTS, arrives), so
// messages from one sender are matched in send order.
//
// A receive accepts a message when, for tagged traffic,
// send_tag & ^ignore == recv_tag & ^ignore, and, when the endpoint has
// FI_DIRECTED_RECV, the receive's source is FI_ADDR_UNSPEC or the
// sender's fi_addr. The queues are intrusive doubly linked lists: removing
// a match from the middle is O(1) and nothing allocates once warm. Posted
// receives are grouped in runs of equal specs (recvQueue), so a message
// is compared with one receive per run.

// recvQueue is a FIFO of posted receives, cut into runs: maximal-at-push
// stretches of consecutive receives with the same matchSpec. A message
// that one receive of a run does not accept, none of them accepts, so
// matching looks at one receive per run: an application that keeps many
// receives of a few kinds posted (a window of equal receives, then one for
// a reply) pays for the kinds, not the receives.
type recvQueue struct {
	head, tail *postedRecv
	n          int
	runs       runList
	freeRuns   []*recvRun
}

// recvRun is a stretch of consecutive receives of one queue that share
// their spec.
type recvRun struct {
	spec        matchSpec
	first, last *postedRecv
	n           int
	next, prev  *recvRun
}

// runList is a doubly linked list of runs in queue order.
type runList struct{ head, tail *recvRun }

func (q *recvQueue) push(pr *postedRecv) {
	pr.next, pr.prev = nil, q.tail
	if q.tail != nil {
		q.tail.next = pr
	} else {
		q.head = pr
	}
	q.tail = pr
	pr.queued = true
	q.n++
	if t := q.runs.tail; t != nil && t.last == pr.prev && t.spec == pr.spec {
		t.last = pr
		t.n++
		pr.run = t
		return
	}
	var run *recvRun
	if k := len(q.freeRuns); k > 0 {
		run = q.freeRuns[k-1]
		q.freeRuns[k-1] = nil
		q.freeRuns = q.freeRuns[:k-1]
	} else {
		run = new(recvRun)
	}
	*run = recvRun{spec: pr.spec, first: pr, last: pr, n: 1, prev: q.runs.tail}
	if q.runs.tail != nil {
		q.runs.tail.next = run
	} else {
		q.runs.head = run
	}
	q.runs.tail = run
	pr.run = run
}

func (q *recvQueue) remove(pr *postedRecv) {
	if run := pr.run; run != nil {
		run.n--
		switch {
		case run.n == 0:
			if run.prev != nil {
				run.prev.next = run.next
			} else {
				q.runs.head = run.next
			}
			if run.next != nil {
				run.next.prev = run.prev
			} else {
				q.runs.tail = run.prev
			}
			*run = recvRun{}
			q.freeRuns = append(q.freeRuns, run)
		case run.first == pr:
			run.first = pr.next // runs are contiguous: the next is the run's
		case run.last == pr:
			run.last = pr.prev
		}
		pr.run = nil
	}
	if pr.prev != nil {
		pr.prev.next = pr.next
	} else {
		q.head = pr.next
	}
	if pr.next != nil {
		pr.next.prev = pr.prev
	} else {
		q.tail = pr.prev
	}
	pr.next, pr.prev = nil, nil
	pr.queued = false
	q.n--
}

// msgQueue is a FIFO of unexpected (or claimed) messages.
type msgQueue struct {
	head, tail *rxMsg
	n          int
}

func (q *msgQueue) push(m *rxMsg) {
	m.next, m.prev = nil, q.tail
	if q.tail != nil {
		q.tail.next = m
	} else {
		q.head = m
	}
	q.tail = m
	q.n++
}

func (q *msgQueue) remove(m *rxMsg) {
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		q.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		q.tail = m.prev
	}
	m.next, m.prev = nil, nil
	q.n--
}

// matchSpec is what a receive (or a peek) asks of a message.
type matchSpec struct {
	src         fi.Addr // FI_ADDR_UNSPEC: any
	tag, ignore uint64
	tagged      bool
}

// accepts reports whether a receive asking for s takes m.
func (r *receiver) accepts(s *matchSpec, m *rxMsg) bool {
	if r.directed && s.src != fi.AddrUnspec && s.src != m.from {
		if m.from != fi.AddrNotAvail || !r.resolve(m) || s.src != m.from {
			return false
		}
	}
	return !s.tagged || (s.tag^m.tag)&^s.ignore == 0
}

// resolve looks up again the sender of a message that arrived while the
// sender was not in the AV, and reports whether it is now. An MPI rank
// inserts its peers' addresses when it is ready; a faster peer's first
// message gets there before and waits unexpected, then must match the
// directed receive naming the peer's new fi_addr. r.mu is held.
func (r *receiver) resolve(m *rxMsg) bool {
	if r.av == nil {
		return false
	}
	from, src := r.av.Resolve(m.peer.Addr)
	if from == fi.AddrNotAvail {
		return false
	}
	m.from, m.src = from, src
	return true
}

// postedQueue and unexpQueue return the queues of a kind of traffic.
func (r *receiver) postedQueue(tagged bool) *recvQueue {
	if tagged {
		return &r.tposted
	}
	return &r.posted
}

func (r *receiver) unexpQueue(tagged bool) *msgQueue {
	if tagged {
		return &r.tunexp
	}
	return &r.unexp
}

// findPosted returns the oldest posted receive that takes m, or nil: the
// first of the first run that takes it (the receives of a run share their
// spec).
func (r *receiver) findPosted(m *rxMsg) *postedRecv {
	for run := r.postedQueue(m.tagged).runs.head; run != nil; run = run.next {
		if r.accepts(&run.spec, m) {
			return run.first
		}
	}
	return nil
}

// findUnexpected returns the oldest unexpected message s takes, or nil.
func (r *receiver) findUnexpected(s *matchSpec) *rxMsg {
	for m := r.unexpQueue(s.tagged).head; m != nil; m = m.next {
		if r.accepts(s, m) {
			return m
		}
	}
	return nil
}
