package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// maxRingSlots bounds a CQ's ring; a larger CQ keeps what does not fit in
// Go (fabric.CQSink's Push fails, and the CQ holds the completion).
const maxRingSlots = 1 << 16

// cqRing is the Go side of a struct xf_cqring (cqring.h): the
// fabric.CQSink of a provider CQ. The Go CQ produces into it under its
// lock; fi_cq_read in C, and Read here, consume.
type cqRing struct {
	r      *C.struct_xf_cqring
	slots  []C.struct_xf_cq_slot
	mask   uint64
	format C.int
}

// newCQRing allocates a ring for a CQ of size entries in format.
func newCQRing(size int, format C.int) *cqRing {
	n := uint32(1) << bits.Len32(uint32(max(size, 2)-1)) // next power of two
	n = min(n, maxRingSlots)
	r := C.xf_cqring_new(C.uint32_t(n))
	if r == nil {
		return nil
	}
	return &cqRing{r: r, slots: unsafe.Slice(r.slot, n), mask: uint64(n - 1), format: format}
}

func (q *cqRing) free() { C.xf_cqring_free(q.r) }

func (q *cqRing) prod() *uint64  { return (*uint64)(unsafe.Pointer(&q.r.prod)) }
func (q *cqRing) cons() *uint64  { return (*uint64)(unsafe.Pointer(&q.r.cons)) }
func (q *cqRing) heldP() *uint32 { return (*uint32)(unsafe.Pointer(&q.r.held)) }

// Push implements fabric.CQSink.
func (q *cqRing) Push(e *fabric.CQEntry, src fi.Addr) bool {
	p := atomic.LoadUint64(q.prod())
	if p-atomic.LoadUint64(q.cons()) > q.mask {
		return false
	}
	s := &q.slots[p&q.mask]
	putCQEntry(unsafe.Pointer(&s.e), C.FI_CQ_FORMAT_TAGGED, e) // e is already reduced to the CQ's format
	s.src = C.fi_addr_t(src)
	atomic.StoreUint64(q.prod(), p+1)
	return true
}

// Len implements fabric.CQSink.
func (q *cqRing) Len() int {
	c := atomic.LoadUint64(q.cons())
	return int(atomic.LoadUint64(q.prod()) - c)
}

// Read implements fabric.CQSink, with the readers' protocol of cqring.h.
func (q *cqRing) Read(buf []fabric.CQEntry, src []fi.Addr) int {
	for {
		c := atomic.LoadUint64(q.cons())
		n := min(atomic.LoadUint64(q.prod())-c, uint64(len(buf)))
		if n == 0 {
			return 0
		}
		for i := uint64(0); i < n; i++ {
			s := &q.slots[(c+i)&q.mask]
			buf[i] = fabric.CQEntry{Context: ctxOf(s.e.op_context), Flags: fi.Flags(s.e.flags), Len: int(s.e.len),
				Data: uint64(s.e.data), Tag: uint64(s.e.tag)}
			if s.e.buf != nil {
				buf[i].Buf = unsafe.Slice((*byte)(s.e.buf), s.e.len)
			}
			if src != nil {
				src[i] = fi.Addr(s.src)
			}
		}
		if atomic.CompareAndSwapUint64(q.cons(), c, c+n) {
			return int(n)
		}
	}
}

// Held implements fabric.CQSink: C reads through Go while the Go CQ holds
// completions (an error at their head) or is closed.
func (q *cqRing) Held(n int, closed bool) {
	var v uint32
	if n > 0 || closed {
		v = 1
	}
	atomic.StoreUint32(q.heldP(), v)
}
