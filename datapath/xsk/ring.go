package xsk

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringHeader is the part of an AF_XDP ring shared with the kernel: the
// producer and consumer indices and the flags word live in the mmapped
// area, so they are only ever read and written through sync/atomic (the
// kernel updates them concurrently). The cached copies are ours alone.
type ringHeader struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	mask     uint32
	size     uint32

	// cachedProd / cachedCons: our last view of the other side's index,
	// refreshed only when the cached view says the ring is full/empty, so
	// the common case touches no shared cache line but our own.
	cachedProd uint32
	cachedCons uint32
}

func newRingHeader(mem []byte, off unix.XDPRingOffset, size uint32) ringHeader {
	base := unsafe.Pointer(&mem[0])
	return ringHeader{
		producer: (*atomic.Uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*atomic.Uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*atomic.Uint32)(unsafe.Add(base, off.Flags)),
		mask:     size - 1,
		size:     size,
	}
}

// needWakeup reports whether the kernel asked to be kicked
// (XDP_RING_NEED_WAKEUP) before it processes this ring again.
func (r *ringHeader) needWakeup() bool {
	return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0
}

// producer side (fill and TX rings): we write entries, the kernel consumes.

// free returns how many entries we may produce, up to want.
func (r *ringHeader) free(want uint32) uint32 {
	n := r.size - (r.cachedProd - r.cachedCons)
	if n >= want {
		return want
	}
	r.cachedCons = r.consumer.Load()
	n = r.size - (r.cachedProd - r.cachedCons)
	return min(n, want)
}

// submit publishes n produced entries to the kernel. The atomic store orders
// the descriptor writes before it (Go's atomics are sequentially
// consistent).
func (r *ringHeader) submit(n uint32) {
	r.cachedProd += n
	r.producer.Store(r.cachedProd)
}

// consumer side (RX and completion rings): the kernel produces, we consume.

// avail returns how many entries we may consume, up to want.
func (r *ringHeader) avail(want uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n == 0 {
		r.cachedProd = r.producer.Load()
		n = r.cachedProd - r.cachedCons
	}
	return min(n, want)
}

// release hands n consumed entries back to the kernel.
func (r *ringHeader) release(n uint32) {
	r.cachedCons += n
	r.consumer.Store(r.cachedCons)
}

// addrRing is a fill or completion ring: entries are UMEM frame addresses.
type addrRing struct {
	ringHeader
	descs []uint64
}

// descRing is an RX or TX ring: entries are xdp_desc.
type descRing struct {
	ringHeader
	descs []unix.XDPDesc
}

func newAddrRing(mem []byte, off unix.XDPRingOffset, size uint32) addrRing {
	return addrRing{
		ringHeader: newRingHeader(mem, off, size),
		descs:      unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), size),
	}
}

func newDescRing(mem []byte, off unix.XDPRingOffset, size uint32) descRing {
	return descRing{
		ringHeader: newRingHeader(mem, off, size),
		descs:      unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[off.Desc])), size),
	}
}
