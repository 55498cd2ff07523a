package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// errData keeps the provider-owned copy of the last error entry's
// err_data, which fi_eq_readerr/fi_cq_readerr hand out "until the next
// read" (C memory, freed when replaced or when the queue closes).
type errData struct {
	mu sync.Mutex
	p  unsafe.Pointer
}

// fill sets an error entry's err_data/err_data_size from data: into the
// application's buffer when it gave one (API 1.5+), else into errData's.
func (e *errData) fill(dst *unsafe.Pointer, dstSize *C.size_t, data []byte) {
	if *dst != nil && *dstSize > 0 {
		n := copy(unsafe.Slice((*byte)(*dst), *dstSize), data)
		*dstSize = C.size_t(n)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p != nil {
		C.free(e.p)
		e.p = nil
	}
	if len(data) == 0 {
		*dst, *dstSize = nil, 0
		return
	}
	e.p = C.CBytes(data)
	*dst, *dstSize = e.p, C.size_t(len(data))
}

func (e *errData) free() {
	e.mu.Lock()
	if e.p != nil {
		C.free(e.p)
		e.p = nil
	}
	e.mu.Unlock()
}

// waitControl answers FI_GETWAIT (an fd, or a struct fi_mutex_cond:
// mutexcond.go) and FI_GETWAITOBJ for an object with a Go Control.
func waitControl(control func(wait.Command, any) error, command C.int, arg unsafe.Pointer) C.int {
	if arg == nil {
		return -C.FI_EINVAL
	}
	switch command {
	case C.FI_GETWAITOBJ:
		var w fi.WaitObj
		if err := control(wait.GetWaitObj, &w); err != nil {
			return errno[C.int](err)
		}
		*(*C.enum_fi_wait_obj)(arg) = C.enum_fi_wait_obj(w)
		return 0
	case C.FI_GETWAIT:
		// A MutexCond answers with its pair (the object's own or, for a
		// queue in a wait set, the set's); anything else with an fd.
		if control(wait.GetWait, &wait.MutexCond{}) == nil {
			return getMutexCond(control, arg)
		}
		var fd int
		if err := control(wait.GetWait, &fd); err != nil {
			return errno[C.int](err)
		}
		*(*C.int)(arg) = C.int(fd)
		return 0
	}
	return -C.FI_ENOSYS
}

// waitSetAttr reads the wait_obj and wait_set of an EQ, CQ or counter
// attr: the set to join for FI_WAIT_SET (ok false when wait_set is not
// one of xdpfab's wait sets), nil otherwise (wait_set is ignored then, as
// the pages say).
func waitSetAttr(obj C.enum_fi_wait_obj, w *C.struct_fid_wait) (*wait.Set, bool) {
	if obj != C.FI_WAIT_SET {
		return nil, true
	}
	s := waitSetOf(w)
	return s, s != nil
}

// ---- EQ ----

// provEQ is the Go side of a struct xf_eq.
type provEQ struct {
	q      *eq.EQ
	c      *C.struct_fid_eq
	err    errData
	parent *provFabric
}

//export xfgo_fabric_eq_open
func xfgo_fabric_eq_open(h C.uintptr_t, attr *C.struct_fi_eq_attr, out **C.struct_fid_eq, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pf := handleOf[provFabric](h)
	if pf == nil || attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	set, ok := waitSetAttr(attr.wait_obj, attr.wait_set)
	if !ok || attr.size > eq.MaxSize {
		return -C.FI_EINVAL
	}
	q, err := pf.f.EQOpen(eq.Attr{Size: int(attr.size), Flags: fi.Flags(attr.flags), WaitObj: fi.WaitObj(attr.wait_obj),
		SignalingVector: int(attr.signaling_vector), WaitSet: set}, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pe := &provEQ{q: q, parent: pf}
	p, _ := register(q, pe, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_eq_new(h, context)) })
	if p == nil {
		q.Close()
		return -C.FI_ENOMEM
	}
	pe.c = (*C.struct_fid_eq)(p)
	pf.children.Add(1)
	*out = pe.c
	return 0
}

//export xfgo_eq_close
func xfgo_eq_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEQ](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	mc := ownMutexCond(pe.q.Attr().WaitObj, pe.q.Control)
	if err := pe.q.Close(); err != nil {
		return errno[C.int](err)
	}
	releaseMutexCond(mc)
	pe.err.free()
	unregister(pe.q, h, unsafe.Pointer(pe.c))
	pe.parent.children.Add(-1)
	return 0
}

//export xfgo_eq_control
func xfgo_eq_control(h C.uintptr_t, command C.int, arg unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEQ](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	return waitControl(pe.q.Control, command, arg)
}

//export xfgo_eq_read
func xfgo_eq_read(h C.uintptr_t, event *C.uint32_t, buf unsafe.Pointer, length C.size_t, flags C.uint64_t,
	blocking C.int, timeout C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEQ](h)
	if pe == nil || event == nil || buf == nil {
		return -C.FI_EINVAL
	}
	if length < C.sizeof_struct_fi_eq_entry {
		return -C.FI_ETOOSMALL
	}
	var e eq.Entry
	var err error
	if blocking != 0 {
		e, err = pe.q.SRead(int(timeout), fi.Flags(flags))
	} else {
		e, err = pe.q.Read(fi.Flags(flags))
	}
	if err != nil {
		return errno[C.ssize_t](err)
	}
	*event = C.uint32_t(e.Event)
	out := (*C.struct_fi_eq_entry)(buf)
	out.fid = (*C.struct_fid)(cFIDOf(e.FID))
	out.context = cCtx(e.Context)
	out.data = C.uint64_t(e.Data)
	return C.sizeof_struct_fi_eq_entry
}

//export xfgo_eq_readerr
func xfgo_eq_readerr(h C.uintptr_t, buf *C.struct_fi_eq_err_entry, flags C.uint64_t) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEQ](h)
	if pe == nil || buf == nil {
		return -C.FI_EINVAL
	}
	e, err := pe.q.ReadErr(fi.Flags(flags))
	if err != nil {
		return errno[C.ssize_t](err)
	}
	buf.fid = (*C.struct_fid)(cFIDOf(e.FID))
	buf.context = cCtx(e.Context)
	buf.data = C.uint64_t(e.Data)
	buf.err = C.int(e.Err)
	buf.prov_errno = C.int(e.ProvErrno)
	pe.err.fill(&buf.err_data, &buf.err_data_size, e.ErrData)
	return C.sizeof_struct_fi_eq_err_entry
}

//export xfgo_eq_write
func xfgo_eq_write(h C.uintptr_t, event C.uint32_t, buf unsafe.Pointer, length C.size_t, flags C.uint64_t) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEQ](h)
	if pe == nil || buf == nil || length < C.sizeof_struct_fi_eq_entry {
		return -C.FI_EINVAL
	}
	in := (*C.struct_fi_eq_entry)(buf)
	e := eq.Entry{Event: eq.Event(event), Context: ctxOf(in.context), Data: uint64(in.data)}
	if in.fid != nil {
		e.FID = foreignFID{unsafe.Pointer(in.fid)}
	}
	if err := pe.q.Write(e, fi.Flags(flags)); err != nil {
		return errno[C.ssize_t](err)
	}
	return C.ssize_t(length)
}

// ---- CQ ----

// provCQ is the Go side of a struct xf_cq.
type provCQ struct {
	q    *fabric.CQ
	c    *C.struct_fid_cq
	err  errData
	ring *cqRing // the CQ's sink, read by C (cqring.go); nil: none
}

// cqBatch is how many completions one read moves through Go at most.
const cqBatch = 64

type cqScratch struct {
	e   [cqBatch]fabric.CQEntry
	src [cqBatch]fi.Addr
}

var cqScratchPool = sync.Pool{New: func() any { return new(cqScratch) }}

//export xfgo_cq_open
func xfgo_cq_open(h C.uintptr_t, attr *C.struct_fi_cq_attr, out **C.struct_fid_cq, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	set, ok := waitSetAttr(attr.wait_obj, attr.wait_set)
	if !ok || attr.size > 1<<22 {
		return -C.FI_EINVAL
	}
	q, err := pd.d.CQOpen(fabric.CQAttr{Size: int(attr.size), Flags: fi.Flags(attr.flags), Format: fabric.CQFormat(attr.format),
		WaitObj: fi.WaitObj(attr.wait_obj), SignalingVector: int(attr.signaling_vector),
		WaitCond: fabric.CQWaitCond(attr.wait_cond), WaitSet: set}, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pc := &provCQ{q: q}
	format := C.int(q.Attr().Format)
	// An empty read goes through Go with either progress: manual drives
	// the endpoints, auto polls them (fabric's CQ.ReadFrom: a reader
	// spinning on fi_cq_read receives for its endpoints itself, without a
	// receive goroutine's wake-up per packet).
	manual := C.int(1)
	if pc.ring = newCQRing(q.Attr().Size, format); pc.ring == nil || q.SetSink(pc.ring) != nil {
		q.Close()
		if pc.ring != nil {
			pc.ring.free()
		}
		return -C.FI_ENOMEM
	}
	p, _ := register(q, pc, func(h C.uintptr_t) unsafe.Pointer {
		return unsafe.Pointer(C.xf_cq_new(h, context, format, pc.ring.r, manual, C.uint(yieldPolls)))
	})
	if p == nil {
		q.Close()
		pc.ring.free()
		return -C.FI_ENOMEM
	}
	pc.c = (*C.struct_fid_cq)(p)
	*out = pc.c
	return 0
}

//export xfgo_cq_close
func xfgo_cq_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCQ](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	mc := ownMutexCond(pc.q.Attr().WaitObj, pc.q.Control)
	if err := pc.q.Close(); err != nil {
		return errno[C.int](err)
	}
	releaseMutexCond(mc)
	pc.err.free()
	unregister(pc.q, h, unsafe.Pointer(pc.c))
	pc.ring.free()
	return 0
}

//export xfgo_cq_control
func xfgo_cq_control(h C.uintptr_t, command C.int, arg unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCQ](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	if command == C.FI_GETWAITOBJ && arg != nil {
		*(*C.enum_fi_wait_obj)(arg) = C.enum_fi_wait_obj(pc.q.Attr().WaitObj)
		return 0
	}
	return waitControl(pc.q.Control, command, arg)
}

// cqEntrySize is the size of one completion of a CQ format.
func cqEntrySize(format C.int) uintptr {
	switch format {
	case C.FI_CQ_FORMAT_CONTEXT:
		return C.sizeof_struct_fi_cq_entry
	case C.FI_CQ_FORMAT_MSG:
		return C.sizeof_struct_fi_cq_msg_entry
	case C.FI_CQ_FORMAT_TAGGED:
		return C.sizeof_struct_fi_cq_tagged_entry
	}
	return C.sizeof_struct_fi_cq_data_entry
}

// putCQEntry writes e in the CQ's format at p. The formats are prefixes
// of fi_cq_tagged_entry.
func putCQEntry(p unsafe.Pointer, format C.int, e *fabric.CQEntry) {
	t := (*C.struct_fi_cq_tagged_entry)(p)
	t.op_context = cCtx(e.Context)
	if format == C.FI_CQ_FORMAT_CONTEXT {
		return
	}
	t.flags = C.uint64_t(e.Flags)
	t.len = C.size_t(e.Len)
	if format == C.FI_CQ_FORMAT_MSG {
		return
	}
	t.buf = unsafe.Pointer(unsafe.SliceData(e.Buf))
	t.data = C.uint64_t(e.Data)
	if format == C.FI_CQ_FORMAT_TAGGED {
		t.tag = C.uint64_t(e.Tag)
	}
}

//export xfgo_cq_read
func xfgo_cq_read(h C.uintptr_t, format C.int, buf unsafe.Pointer, count C.size_t, src *C.fi_addr_t,
	blocking C.int, timeout C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pc := handleOf[provCQ](h)
	if pc == nil || (buf == nil && count > 0) {
		return -C.FI_EINVAL
	}
	s := cqScratchPool.Get().(*cqScratch)
	defer cqScratchPool.Put(s)
	n := min(int(count), cqBatch)
	var srcs []fi.Addr
	if src != nil {
		srcs = s.src[:n]
	}
	var got int
	var err error
	if blocking != 0 {
		got, err = pc.q.SReadFrom(s.e[:n], srcs, int(timeout))
	} else {
		got, err = pc.q.ReadFrom(s.e[:n], srcs)
	}
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

//export xfgo_cq_readerr
func xfgo_cq_readerr(h C.uintptr_t, buf *C.struct_fi_cq_err_entry, flags C.uint64_t) (ret C.ssize_t) {
	defer catch(&ret)
	pc := handleOf[provCQ](h)
	if pc == nil || buf == nil {
		return -C.FI_EINVAL
	}
	e, err := pc.q.ReadErr(fi.Flags(flags))
	if err != nil {
		return errno[C.ssize_t](err)
	}
	buf.op_context = cCtx(e.Context)
	buf.flags = C.uint64_t(e.Flags)
	buf.len = C.size_t(e.Len)
	buf.buf = unsafe.Pointer(unsafe.SliceData(e.Buf))
	buf.data = C.uint64_t(e.Data)
	buf.tag = C.uint64_t(e.Tag)
	buf.olen = C.size_t(e.OLen)
	buf.err = C.int(e.Err)
	buf.prov_errno = C.int(e.ProvErrno)
	pc.err.fill(&buf.err_data, &buf.err_data_size, e.ErrData)
	return 1
}

//export xfgo_cq_signal
func xfgo_cq_signal(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCQ](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	return errno[C.int](pc.q.Signal())
}

// ---- counters ----

// provCntr is the Go side of a struct xf_cntr.
type provCntr struct {
	c  *fabric.Cntr
	cc *C.struct_fid_cntr
}

//export xfgo_cntr_open
func xfgo_cntr_open(h C.uintptr_t, attr *C.struct_fi_cntr_attr, out **C.struct_fid_cntr, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	set, ok := waitSetAttr(attr.wait_obj, attr.wait_set)
	if !ok {
		return -C.FI_EINVAL
	}
	c, err := pd.d.CntrOpen(fabric.CntrAttr{Events: fabric.CntrEvents(attr.events), WaitObj: fi.WaitObj(attr.wait_obj),
		Flags: fi.Flags(attr.flags), WaitSet: set}, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pc := &provCntr{c: c}
	p, _ := register(c, pc, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_cntr_new(h, context)) })
	if p == nil {
		c.Close()
		return -C.FI_ENOMEM
	}
	pc.cc = (*C.struct_fid_cntr)(p)
	*out = pc.cc
	return 0
}

//export xfgo_cntr_close
func xfgo_cntr_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCntr](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	mc := ownMutexCond(pc.c.Attr().WaitObj, pc.c.Control)
	if err := pc.c.Close(); err != nil {
		return errno[C.int](err)
	}
	releaseMutexCond(mc)
	unregister(pc.c, h, unsafe.Pointer(pc.cc))
	return 0
}

//export xfgo_cntr_control
func xfgo_cntr_control(h C.uintptr_t, command C.int, arg unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCntr](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	if command == C.FI_GETWAITOBJ && arg != nil { // as the CQ's: FI_WAIT_SET for a set's member
		*(*C.enum_fi_wait_obj)(arg) = C.enum_fi_wait_obj(pc.c.Attr().WaitObj)
		return 0
	}
	return waitControl(pc.c.Control, command, arg)
}

//export xfgo_cntr_read
func xfgo_cntr_read(h C.uintptr_t, errs C.int) (ret C.uint64_t) {
	defer func() {
		if recover() != nil {
			ret = 0
		}
	}()
	pc := handleOf[provCntr](h)
	if pc == nil {
		return 0
	}
	if errs != 0 {
		return C.uint64_t(pc.c.ReadErr())
	}
	return C.uint64_t(pc.c.Read())
}

//export xfgo_cntr_update
func xfgo_cntr_update(h C.uintptr_t, op C.int, v C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCntr](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	var err error
	switch op {
	case 0:
		err = pc.c.Add(uint64(v))
	case 1:
		err = pc.c.Set(uint64(v))
	case 2:
		err = pc.c.AddErr(uint64(v))
	case 3:
		err = pc.c.SetErr(uint64(v))
	}
	return errno[C.int](err)
}

//export xfgo_cntr_wait
func xfgo_cntr_wait(h C.uintptr_t, threshold C.uint64_t, timeout C.int) (ret C.int) {
	defer catch(&ret)
	pc := handleOf[provCntr](h)
	if pc == nil {
		return -C.FI_EINVAL
	}
	return errno[C.int](pc.c.Wait(uint64(threshold), int(timeout)))
}
