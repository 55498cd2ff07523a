package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
)

// The ring sender's receive side (see ringsend.go). At a round's start it
// receives one datagram from each ready socket of a transport using it,
// all in one io_uring_enter, into a slot of its own; the transport's
// Receive hands the datagram over from the slot (a copy) instead of
// calling recvmmsg. A round has at most ringRxSlots such receives (the
// poller's other ready sockets are received from by their handlers as
// usual), and a transport holds at most one received datagram at a time:
// what else its socket has waits there, and the level-triggered epoll set
// reports the socket again next round. Receive looks for the rest with
// recvmmsg only when the round before received from the socket too (one
// busy peer's burst): with thousands of sockets, each with a datagram now
// and then, the look found nothing and cost more than the ring's receive
// (Transport.Receive). A slot holds any UDP datagram
// (ringRxBytes); the slots are mapped memory, so the pages of the short
// datagrams' slots tails are never touched. A receive that finds no
// datagram (a spurious report) frees its slot; one that finds the
// socket's pending ICMP error flags it for Receive, which reads the
// error queue as it does when recvmmsg meets one.

// ringRxSlots is how many datagrams a round receives through the ring.
const ringRxSlots = 64

// ringRxBytes holds the largest UDP datagram.
const ringRxBytes = 65536

// rxTag marks a receive's completion tag.
const rxTag = 1 << 32

type ringRxSlot struct {
	hdr  unix.Msghdr
	iov  unix.Iovec
	name unix.RawSockaddrInet6
	t    *Transport // whose socket (nil: free)
	n    int        // the datagram's whole length once received
	done bool       // received
}

// ringRx is the receive side's slots; guarded by the ring sender's mu.
type ringRx struct {
	mem   []byte // ringRxSlots * ringRxBytes, mapped
	slots []ringRxSlot
	free_ []uint16
}

func (r *ringRx) init() error {
	mem, err := unix.Mmap(-1, 0, ringRxSlots*ringRxBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	r.mem = mem
	r.slots = make([]ringRxSlot, ringRxSlots)
	r.free_ = make([]uint16, 0, ringRxSlots)
	for i := range r.slots {
		sl := &r.slots[i]
		sl.hdr.Name = (*byte)(unsafe.Pointer(&sl.name))
		sl.hdr.Iov = &sl.iov
		sl.hdr.Iovlen = 1
		sl.iov.Base = &mem[i*ringRxBytes]
		sl.iov.SetLen(ringRxBytes)
		r.free_ = append(r.free_, uint16(len(r.slots)-1-i))
	}
	return nil
}

func (r *ringRx) buf(k uint16) []byte {
	return r.mem[int(k)*ringRxBytes : int(k+1)*ringRxBytes]
}

func (r *ringRx) free(k uint16) {
	r.slots[k].t = nil
	r.free_ = append(r.free_, k)
}

func (r *ringRx) idle() bool { return len(r.free_) == len(r.slots) }

func (r *ringRx) close() {
	if r.mem != nil && r.idle() {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// receiveLocked receives a datagram from each of the ready descriptors
// that are sockets of transports using the ring sender and hold none yet,
// in one io_uring_enter. s.mu is held.
func (s *ringSender) receiveLocked(ready []int) {
	n := 0
	for _, fd := range ready {
		if fd >= len(s.byFD) || len(s.rx.free_) == 0 {
			continue
		}
		t := s.byFD[fd]
		if t == nil || t.ringRxHeld >= 0 || t.closed.Load() {
			continue
		}
		k := s.rx.free_[len(s.rx.free_)-1]
		s.rx.free_ = s.rx.free_[:len(s.rx.free_)-1]
		sl := &s.rx.slots[k]
		sl.t, sl.n, sl.done = t, 0, false
		t.ringRxHeld = int32(k) // taken: a second report of fd this round receives nothing more
		t.ringRxAgain = t.ringRxRound == s.round-1
		t.ringRxRound = s.round
		sl.hdr.Namelen = unix.SizeofSockaddrInet6
		sl.hdr.Flags = 0
		s.ring.pushRecvmsg(fd, &sl.hdr, rxTag|uint64(k))
		n++
	}
	if n > 0 {
		s.queued += n
		s.lostErr = s.ring.submit(s.dropFn)
		s.submits++
		s.queued = 0
		s.ring.reap(s.reapFn)
	}
}

// received is the completion of a receive into slot k.
func (s *ringSender) received(k uint16, res int32) {
	sl := &s.rx.slots[k]
	t := sl.t
	if res >= 0 && !t.closed.Load() {
		sl.n, sl.done = int(res), true
		return // t.ringRxHeld stays k: Receive takes it
	}
	if res < 0 && isICMPErrno(unix.Errno(-res)) {
		t.errPending.Store(true) // the error queue holds the bounced datagram
	}
	t.ringRxHeld = -1
	s.rx.free(k)
}

// takeReceived moves t's received datagram, if any, into pkts[0] and
// returns 1, or 0 when it holds none; again reports whether the round
// before the one that received it received from t too. t.rxMu is held.
func (s *ringSender) takeReceived(t *Transport, pkts []datapath.Packet) (n int, again bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := t.ringRxHeld
	if k < 0 {
		return 0, false
	}
	sl := &s.rx.slots[k]
	if !sl.done {
		// Not completed yet: unreachable (completions are reaped in the
		// same io_uring_enter); leave it.
		return 0, false
	}
	t.ringRxHeld = -1
	n = sl.n
	s.rx.free(uint16(k))
	buf := pkts[0].Buf[:cap(pkts[0].Buf)]
	if n > len(buf) || n > ringRxBytes {
		t.stats.rxTrunc.Add(1)
		return 0, false
	}
	pkts[0].Buf = buf[:copy(buf, s.rx.buf(uint16(k))[:n])]
	pkts[0].Addr = sockaddrToAddrPort(&sl.name)
	pkts[0].Meta = datapath.NoMeta
	t.stats.rxPackets.Add(1)
	t.stats.rxRing.Add(1)
	return 1, t.ringRxAgain
}

// dropHeldRx frees t's received datagram (t is closing). s.mu is held.
func (s *ringSender) dropHeldRx(t *Transport) {
	if k := t.ringRxHeld; k >= 0 {
		t.ringRxHeld = -1
		if s.rx.slots[k].t == t {
			s.rx.free(uint16(k))
		}
	}
}
