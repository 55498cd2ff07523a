package xsk

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Warming the kernel's mapping of the UMEM.
//
// In copy mode the kernel reads transmitted frames out of the UMEM and
// writes received packets into it through a mapping of its own (a vmap
// made at XDP_UMEM_REG). On a virtual machine whose hypervisor shadows
// page tables the first access through that mapping to each page traps to
// the hypervisor (20-30 µs a page on the project's VM), and user space's
// reads (warm) do not warm it: a connection's first windows paid those
// traps on the datapath, each side's first few hundred packets a page
// each, in the sendto that delivered them (a 2,000-write fi_rma_bw spent
// 10-25 ms of its 40-60 ms there, against 3 ms for tcp;ofi_rxm).
//
// The only kernel paths through that mapping are the datapath's, so
// WarmKernelMapping takes one: it transmits one descriptor per page of the
// frames the first packets use, each longer than the interface's MTU
// allows, which the kernel copies out of the UMEM into an skb (touching
// the page through its mapping) and a veth then drops as too big for its
// peer (is_skb_forwardable, against the peer's MTU), before anything
// reaches the peer: nothing is put on the wire. It is for veth only, with
// frames longer than the MTU plus an Ethernet header and a VLAN tag: a
// real NIC's driver in copy mode may send an oversized frame, and in
// zero-copy mode nothing copies. The frames are still all zeros at Open:
// should a peer with a larger MTU than ours receive one, its destination
// MAC (00:00:00:00:00:00) is no host's and its stack drops it.

// txWarmFrames is how many of the TX frames (from the top of the free
// stack, the ones a connection's first bursts take: a window of 64 4 KiB
// writes is 192 frames) Open reads (warm) and WarmKernelMapping touches;
// the receive frames they touch are the fill ring's initial ones.
const txWarmFrames = 512

// WarmKernelMapping touches, through the kernel's mapping, one page of
// every frame the fill ring holds at Open and of the txWarmFrames
// transmit frames used first, by transmitting each page as an oversized
// frame that a veth drops (see above). Call it once, right after Open, on
// a copy-mode socket of a veth and before any traffic; it returns how
// many pages the kernel took. The frames stay where they were (fill ring,
// free list).
func (s *Socket) WarmKernelMapping() (int, error) {
	if s.mode != BindCopy {
		return 0, nil
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.rxMu.Lock()
	rxPages := s.pageStarts(s.fillPop)
	s.rxMu.Unlock()
	top := len(s.txFree)
	txFrames := s.txFree[max(0, top-txWarmFrames):top]
	var pages []uint64
	pages = append(pages, rxPages...)
	seen := make(map[uint64]bool, len(txFrames))
	for _, f := range txFrames {
		p := f &^ (pageSize - 1)
		if !seen[p] {
			seen[p] = true
			pages = append(pages, p)
		}
	}
	// The frame's whole length: longer than any MTU the frame size was
	// chosen for (FrameSizeFor), so the veth drops it. One frame at a
	// time: the kernel stops a batch at a dropped frame (EBUSY), and a
	// warm that gives up must leave no descriptor of its own behind (its
	// completion would put a receive frame on the free list).
	length := uint32(s.frameSize)
	for done, p := range pages {
		if s.tx.free(1) == 0 {
			return done, nil // the ring is never full here; give up cleanly
		}
		s.tx.descs[s.tx.cachedProd&s.tx.mask] = unix.XDPDesc{Addr: p, Len: length}
		s.tx.submit(1)
		if err := s.warmOne(); err != nil {
			return done, err
		}
	}
	return len(pages), nil
}

// warmOneWait bounds how long warmOne waits for the kernel to take and
// complete one warm frame (it does both within the sendto on a veth).
const warmOneWait = 5 * time.Second

// warmOne kicks the kernel until it has taken the one descriptor just
// submitted and completed it, and takes the completion off the ring. An
// error means the descriptor may still be the kernel's: the socket must
// not be used.
func (s *Socket) warmOne() error {
	deadline := time.Now().Add(warmOneWait)
	for s.tx.consumer.Load() != s.tx.cachedProd {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if e != 0 && !errors.Is(e, unix.EBUSY) && !errors.Is(e, unix.EAGAIN) && !errors.Is(e, unix.ENOBUFS) && !errors.Is(e, unix.EINTR) {
			return fmt.Errorf("xsk: warming the kernel's UMEM mapping: %w", e)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("xsk: warming the kernel's UMEM mapping: a frame not taken in %v", warmOneWait)
		}
	}
	for s.drainWarmCompletions() == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("xsk: warming the kernel's UMEM mapping: a frame not completed in %v", warmOneWait)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// pageStarts returns the page of every frame among the first n frames of
// the UMEM (the fill ring's initial ones), each page once.
func (s *Socket) pageStarts(n int) []uint64 {
	var out []uint64
	last := ^uint64(0)
	for i := range n {
		p := uint64(i) * s.frameSize &^ (pageSize - 1)
		if p != last {
			out = append(out, p)
			last = p
		}
	}
	return out
}

// drainWarmCompletions takes warm frames' completions off the ring and
// returns how many.
func (s *Socket) drainWarmCompletions() int {
	n := s.comp.avail(s.comp.size)
	if n > 0 {
		s.comp.release(n)
	}
	return int(n)
}
