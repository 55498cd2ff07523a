package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"unsafe"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// xfgo_cq_sreadcond is fi_cq_sread/fi_cq_sreadfrom with a non-NULL cond:
// CQ.SReadCond with the size_t threshold cond points to when the
// CQ was opened with FI_CQ_COND_THRESHOLD (cond is not read otherwise,
// as fi_cq(3) ignores it then).
//
//export xfgo_cq_sreadcond
func xfgo_cq_sreadcond(h C.uintptr_t, format C.int, buf unsafe.Pointer, count C.size_t, src *C.fi_addr_t,
	cond unsafe.Pointer, timeout C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pc := handleOf[provCQ](h)
	if pc == nil || (buf == nil && count > 0) {
		return -C.FI_EINVAL
	}
	if pc.q.Attr().WaitCond != fabric.CQCondThreshold {
		return xfgo_cq_read(h, format, buf, count, src, 1, timeout)
	}
	threshold := int(min(uint64(*(*C.size_t)(cond)), cqBatch))
	s := cqScratchPool.Get().(*cqScratch)
	defer cqScratchPool.Put(s)
	n := min(int(count), cqBatch)
	var srcs []fi.Addr
	if src != nil {
		srcs = s.src[:n]
	}
	got, err := pc.q.SReadCond(s.e[:n], srcs, threshold, int(timeout))
	if err != nil {
		return errno[C.ssize_t](err)
	}
	size := cqEntrySize(format)
	for i := 0; i < got; i++ {
		putCQEntry(unsafe.Add(buf, uintptr(i)*size), format, &s.e[i])
		s.e[i] = fabric.CQEntry{}
	}
	if src != nil {
		copy(unsafe.Slice((*fi.Addr)(unsafe.Pointer(src)), got), s.src[:got])
	}
	return C.ssize_t(got)
}
