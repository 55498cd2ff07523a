package udp

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
)

// Options.RingSend: the sends of many sockets in one system call.
//
// With thousands of endpoints in a process (issue 17: 10,000 initiators
// against one target) each operation's request goes out alone on its own
// endpoint's socket: a sendmmsg sends from one socket only, and no two
// operations in flight share one. At 10,000 peers the initiators made 1.2
// sendmmsg per operation against 0.37 with one peer, and the target got
// the requests one datagram at a time, a wake-up each, where one peer's
// came in bursts. But the requests are made in rounds: the shared receive
// poller (datapath/rxpoll) runs the handlers of every socket that became
// ready, each completion posts the next operation on another endpoint.
// The ring sender holds the datagrams that the transports using it send
// during a round (copied into its own slots, so Send's caller may reuse
// its buffers at once, as with sendmmsg) and at the round's end submits
// them all to one io_uring in one io_uring_enter: a SENDMSG each, on each
// datagram's own socket. Outside a round (the application's own posts, a
// timer's retransmissions while the poller is parked) Send sends at once
// with sendmmsg, as without the option.
//
// One ring sender per process, made by the first transport that asks and
// closed with the last one (its ring, its slots). Its slots are few
// (ringSlots of ringSlotBytes): a datagram that does not fit one, or that
// finds every slot in use, is sent at once with sendmmsg; nothing waits
// for a slot. A submission's completion frees its slot; completions are
// reaped at each round's end. A socket's Close first submits what the
// ring holds (so no submission names a descriptor after it is closed and
// its number reused). A datagram the kernel refuses is counted in
// Stats.TxErrors and dropped, as sendmmsg's are (the reliability engine
// resends); a send that reports a pending ICMP error meant for the receive
// side flags it for Receive and is submitted again at the next round's
// end, as is one that found its socket's buffer full (at most 4 times).
//
// Receiving likewise: at a round's start the ring sender receives one
// datagram from each of the round's ready sockets that belongs to a
// transport using it, all in one io_uring_enter (RECVMSG, MSG_DONTWAIT),
// into slots of its own (ringrecv.go); the socket's handler then takes it
// from there in its Receive instead of calling recvmmsg. Per round that
// is two system calls for all the sockets (and the poller's epoll_wait)
// where each ready socket cost a recvmmsg and each datagram sent a
// sendmmsg.

// ringSlots is how many datagrams the ring sender holds at once.
const ringSlots = 256

// ringSlotBytes is the largest datagram the ring sender holds; a larger
// one is sent at once with sendmmsg.
const ringSlotBytes = 2048

// ringSlot is one held datagram: its sendmsg arguments and a copy of it.
type ringSlot struct {
	hdr   unix.Msghdr
	iov   unix.Iovec
	name  unix.RawSockaddrInet6
	t     *Transport // whose datagram (nil: free)
	n     int        // its length
	tries uint8      // submissions that met a pending ICMP error
	buf   [ringSlotBytes]byte
}

// ringSender is the process's ring sender (see above).
type ringSender struct {
	mu      sync.Mutex
	ring    *uring
	slots   []ringSlot
	free    []uint16
	retry   []uint16 // slots to submit again at the round's end
	open    bool     // the poller is running a round: hold sends
	round   uint32   // rounds started (RoundStart), for Receive's looks
	queued  int      // submissions filled since the last submit
	users   int      // transports using it (ringMu)
	unhook  func()
	reapFn  func(tag uint64, res int32)
	dropFn  func(tag uint64)
	lostErr error  // the last submit's error, for tests
	submits uint64 // io_uring_enter calls that submitted, for tests

	rx   ringRx       // the receive side (ringrecv.go)
	byFD []*Transport // the transports using it, by descriptor
}

var (
	ringMu     sync.Mutex
	ringShared *ringSender
)

// useRingSender returns the process's ring sender, made if needed, for a
// transport that will call releaseRingSender when it closes.
func useRingSender() (*ringSender, error) {
	ringMu.Lock()
	defer ringMu.Unlock()
	if ringShared == nil {
		r, err := newUring(ringSlots)
		if err != nil {
			return nil, err
		}
		s := &ringSender{ring: r, slots: make([]ringSlot, ringSlots), free: make([]uint16, 0, ringSlots),
			retry: make([]uint16, 0, ringSlots)}
		for i := range s.slots {
			sl := &s.slots[i]
			sl.hdr.Name = (*byte)(unsafe.Pointer(&sl.name))
			sl.hdr.Iov = &sl.iov
			sl.hdr.Iovlen = 1
			sl.iov.Base = &sl.buf[0]
			s.free = append(s.free, uint16(len(s.slots)-1-i))
		}
		if err := s.rx.init(); err != nil {
			r.close()
			return nil, err
		}
		s.reapFn = s.completed
		s.dropFn = s.withdrawn
		s.unhook = rxpoll.AddRoundHook(s)
		ringShared = s
	}
	ringShared.users++
	return ringShared, nil
}

// register makes t's datagrams receivable by RoundStart.
func (s *ringSender) register(t *Transport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.fd >= len(s.byFD) {
		s.byFD = append(s.byFD, make([]*Transport, t.fd+1-len(s.byFD))...)
	}
	s.byFD[t.fd] = t
}

// releaseRingSender is a closing transport's: its held datagrams are
// submitted (Close closes the socket next); the last user's release
// waits for the ring's outstanding sends and closes the ring.
func (s *ringSender) release(t *Transport) {
	s.mu.Lock()
	if t.fd < len(s.byFD) && s.byFD[t.fd] == t {
		s.byFD[t.fd] = nil
	}
	s.dropHeldRx(t)
	if s.holds(t) {
		s.submitLocked()
	}
	s.mu.Unlock()
	ringMu.Lock()
	defer ringMu.Unlock()
	if s.users--; s.users > 0 {
		return
	}
	ringShared = nil
	s.unhook()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = false
	s.submitLocked()
	s.ring.reap(s.reapFn)
	if len(s.free)+len(s.retry) != len(s.slots) || !s.rx.idle() {
		// Every submission completes within its io_uring_enter
		// (MSG_DONTWAIT): unreachable. Should the kernel still hold one,
		// its memory must never be reused.
		leaked = append(leaked, s)
	}
	s.ring.close()
	s.rx.close()
}

// leaked keeps ring senders whose slots the kernel might still use.
var leaked []*ringSender

// holds reports whether a datagram of t is held or in flight. s.mu is held.
func (s *ringSender) holds(t *Transport) bool {
	if len(s.free) == len(s.slots) {
		return false
	}
	for i := range s.slots {
		if s.slots[i].t == t {
			return true
		}
	}
	return false
}

// RoundStart implements rxpoll.RoundHook: hold what is sent from now on,
// and receive a datagram from each ready socket of a transport using the
// ring sender, all in one io_uring_enter (ringrecv.go).
func (s *ringSender) RoundStart(ready []int) {
	s.mu.Lock()
	s.open = true
	s.round++
	s.receiveLocked(ready)
	s.mu.Unlock()
}

// RoundEnd implements rxpoll.RoundHook: submit what was held.
func (s *ringSender) RoundEnd() {
	s.mu.Lock()
	s.open = false
	if s.queued > 0 || len(s.retry) > 0 || len(s.free) < len(s.slots) {
		s.submitLocked()
	}
	s.mu.Unlock()
}

// hold copies pkts, t's datagrams, into slots with submissions for the
// round's end and returns those it did not take (all of them outside a
// round; from the first that does not fit or finds no slot on), which the
// caller sends at once. It returns datapath.ErrClosed, having taken none,
// when t is closing.
func (s *ringSender) hold(t *Transport, pkts []datapath.Packet) ([]datapath.Packet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return pkts, nil
	}
	if t.closed.Load() {
		return nil, datapath.ErrClosed // Close may have submitted already: the descriptor is going
	}
	for i := range pkts {
		p := &pkts[i]
		if len(p.Buf) > ringSlotBytes {
			return pkts[i:], nil
		}
		if len(s.free) == 0 {
			s.ring.reap(s.reapFn)
			if len(s.free) == 0 {
				return pkts[i:], nil
			}
		}
		k := s.free[len(s.free)-1]
		sl := &s.slots[k]
		nl, ok := t.putSockaddr(&sl.name, p.Addr)
		if !ok || len(p.Buf) == 0 {
			t.stats.txErr.Add(1)
			continue
		}
		s.free = s.free[:len(s.free)-1]
		sl.t, sl.n, sl.tries = t, copy(sl.buf[:], p.Buf), 0
		sl.hdr.Namelen = nl
		sl.iov.SetLen(sl.n)
		s.ring.pushSendmsg(t.fd, &sl.hdr, uint64(k))
		s.queued++
	}
	return nil, nil
}

// submitLocked submits the held datagrams and those to retry, then reaps
// the completions. s.mu is held.
func (s *ringSender) submitLocked() {
	for _, k := range s.retry {
		sl := &s.slots[k]
		if sl.t.closed.Load() {
			s.freeSlot(k)
			continue
		}
		s.ring.pushSendmsg(sl.t.fd, &sl.hdr, uint64(k))
		s.queued++
	}
	s.retry = s.retry[:0]
	if s.queued > 0 {
		s.lostErr = s.ring.submit(s.dropFn)
		s.submits++
		s.queued = 0
	}
	s.ring.reap(s.reapFn)
}

// completed is the reap callback: the slot's send finished with res
// (bytes sent, or -errno).
func (s *ringSender) completed(tag uint64, res int32) {
	if tag&rxTag != 0 {
		s.received(uint16(tag), res)
		return
	}
	k := uint16(tag)
	sl := &s.slots[k]
	t := sl.t
	switch {
	case res >= 0:
		t.stats.txPackets.Add(1)
		t.stats.txRing.Add(1)
	case (isICMPErrno(unix.Errno(-res)) || unix.Errno(-res) == unix.EAGAIN) && sl.tries < 4 && !t.closed.Load():
		// As in sendBatch: the error was the socket's pending one, meant
		// for the receive side, or the socket's buffer was full (where
		// sendBatch would wait); the datagram was not sent.
		if unix.Errno(-res) != unix.EAGAIN {
			t.errPending.Store(true)
		}
		sl.tries++
		s.retry = append(s.retry, k)
		return
	default:
		t.stats.txErr.Add(1)
	}
	s.freeSlot(k)
}

// withdrawn is submit's callback for a submission the kernel did not take.
func (s *ringSender) withdrawn(tag uint64) {
	if tag&rxTag != 0 {
		s.rx.free(uint16(tag))
		return
	}
	k := uint16(tag)
	s.slots[k].t.stats.txErr.Add(1)
	s.freeSlot(k)
}

func (s *ringSender) freeSlot(k uint16) {
	s.slots[k].t = nil
	s.free = append(s.free, k)
}
