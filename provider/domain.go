package main

/*
#include <netinet/in.h>
#include "xdpfab.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"unsafe"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// provDomain is the Go side of a struct xf_domain.
type provDomain struct {
	d      *fabric.Domain
	c      *C.struct_fid_domain
	parent *provFabric
}

// cFIDs maps the Go objects the provider opened to their C fids, for the
// events that name them (fi_eq_entry.fid).
var cFIDs sync.Map // fi.FID -> *C.struct_fid

// foreignFID is a fid the application wrote into an EQ (fi_eq_write).
type foreignFID struct{ p unsafe.Pointer }

func (f foreignFID) Class() fi.Class { return fi.ClassUnspec }
func (f foreignFID) Context() any    { return nil }

func cFIDOf(obj fi.FID) unsafe.Pointer {
	if obj == nil {
		return nil
	}
	if f, ok := obj.(foreignFID); ok {
		return f.p
	}
	if p, ok := cFIDs.Load(obj); ok {
		return unsafe.Pointer(p.(*C.struct_fid))
	}
	return nil
}

// register wraps a new Go object in a handle and its C fid; unregister
// undoes it when the object is closed.
func register(obj fi.FID, wrapper any, newC func(h C.uintptr_t) unsafe.Pointer) (unsafe.Pointer, cgo.Handle) {
	h := cgo.NewHandle(wrapper)
	p := newC(C.uintptr_t(h))
	if p == nil {
		h.Delete()
		return nil, 0
	}
	if obj != nil {
		cFIDs.Store(obj, (*C.struct_fid)(p))
	}
	return p, h
}

func unregister(obj fi.FID, h C.uintptr_t, p unsafe.Pointer) {
	if obj != nil {
		cFIDs.Delete(obj)
	}
	cgo.Handle(h).Delete()
	C.xf_free(p)
}

// ctxOf is the Go context of a C context pointer.
func ctxOf(p unsafe.Pointer) any {
	if p == nil {
		return nil
	}
	return p
}

// cCtx is the C context pointer of a Go context.
func cCtx(ctx any) unsafe.Pointer {
	p, _ := ctx.(unsafe.Pointer)
	return p
}

//export xfgo_fabric_domain
func xfgo_fabric_domain(h C.uintptr_t, info *C.struct_fi_info, out **C.struct_fid_domain, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pf := handleOf[provFabric](h)
	if pf == nil || info == nil || out == nil {
		return -C.FI_EINVAL
	}
	gi := infoFromC(info)
	if gi.DomainAttr != nil {
		gi.DomainAttr.Logf = logf
	}
	d, err := pf.f.DomainFromInfo(gi, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pd := &provDomain{d: d, parent: pf}
	p, _ := register(d, pd, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_domain_new(h, context)) })
	if p == nil {
		d.Close()
		return -C.FI_ENOMEM
	}
	pd.c = (*C.struct_fid_domain)(p)
	pf.children.Add(1)
	*out = pd.c
	return 0
}

//export xfgo_domain_close
func xfgo_domain_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil {
		return -C.FI_EINVAL
	}
	if err := pd.d.Close(); err != nil {
		return errno[C.int](err)
	}
	unregister(pd.d, h, unsafe.Pointer(pd.c))
	pd.parent.children.Add(-1)
	return 0
}

//export xfgo_domain_bind
func xfgo_domain_bind(h, obj C.uintptr_t, flags C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	pe := handleOf[provEQ](obj)
	if pd == nil || pe == nil {
		return -C.FI_EINVAL
	}
	return errno[C.int](pd.d.Bind(pe.q, fi.Flags(flags)))
}

//export xfgo_query_atomic
func xfgo_query_atomic(h C.uintptr_t, dt C.enum_fi_datatype, op C.enum_fi_op, attr *C.struct_fi_atomic_attr, flags C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || attr == nil {
		return -C.FI_EINVAL
	}
	a, err := pd.d.QueryAtomic(fatomic.Datatype(dt), fatomic.Op(op), fi.Flags(flags))
	if err != nil {
		return errno[C.int](err)
	}
	attr.count = C.size_t(a.Count)
	attr.size = C.size_t(a.Size)
	return 0
}

// ---- memory registration ----

// provMR is the Go side of a struct xf_mr.
type provMR struct {
	m *mr.MR
	c *C.struct_fid_mr
}

//export xfgo_mr_regattr
func xfgo_mr_regattr(h C.uintptr_t, attr *C.struct_fi_mr_attr, flags C.uint64_t, out **C.struct_fid_mr) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	if attr.iov_count > mr.IOVLimit {
		return -C.FI_EINVAL
	}
	// The region is the application's memory, used in place.
	iovs := unsafe.Slice(attr.mr_iov, attr.iov_count)
	ga := mr.Attr{IOV: make([][]byte, len(iovs)), Access: fi.Flags(attr.access), Offset: uint64(attr.offset),
		RequestedKey: uint64(attr.requested_key), Context: ctxOf(attr.context), Iface: mr.HMEMIface(attr.iface)}
	for i, v := range iovs {
		if v.iov_len > 0 {
			ga.IOV[i] = unsafe.Slice((*byte)(v.iov_base), v.iov_len)
		}
	}
	if attr.auth_key != nil && attr.auth_key_size > 0 {
		ga.AuthKey = C.GoBytes(unsafe.Pointer(attr.auth_key), C.int(attr.auth_key_size))
	}
	m := adoptKernelWindow(pd, &ga, fi.Flags(flags))
	if m == nil {
		var err error
		if m, err = pd.d.MRRegAttr(&ga, fi.Flags(flags)); err != nil {
			return errno[C.int](err)
		}
	}
	pm := &provMR{m: m}
	p, _ := register(m, pm, func(h C.uintptr_t) unsafe.Pointer {
		return unsafe.Pointer(C.xf_mr_new(h, attr.context, C.uint64_t(m.Key())))
	})
	if p == nil {
		m.Close()
		return -C.FI_ENOMEM
	}
	pm.c = (*C.struct_fid_mr)(p)
	*out = pm.c
	return 0
}

//export xfgo_mr_close
func xfgo_mr_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pm := handleOf[provMR](h)
	if pm == nil {
		return -C.FI_EINVAL
	}
	if err := pm.m.Close(); err != nil {
		return errno[C.int](err)
	}
	unregister(pm.m, h, unsafe.Pointer(pm.c))
	return 0
}

//export xfgo_mr_bind
func xfgo_mr_bind(h, obj C.uintptr_t, flags C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pm := handleOf[provMR](h)
	target := goObject(obj)
	if pm == nil || target == nil {
		return -C.FI_EINVAL
	}
	return errno[C.int](pm.m.Bind(target, fi.Flags(flags)))
}

//export xfgo_mr_control
func xfgo_mr_control(h C.uintptr_t, command C.int, arg unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pm := handleOf[provMR](h)
	if pm == nil {
		return -C.FI_EINVAL
	}
	switch command {
	case C.FI_ENABLE:
		if err := pm.m.Enable(); err != nil {
			return errno[C.int](err)
		}
		C.xf_mr_set_key(pm.c, C.uint64_t(pm.m.Key()))
		return 0
	}
	return -C.FI_ENOSYS
}

// mrDesc is the mr.Desc of a descriptor handle (0: none).
func mrDesc(h C.uintptr_t) mr.Desc {
	if pm := handleOf[provMR](h); pm != nil {
		return pm.m.Desc()
	}
	return mr.Desc{}
}

// goObject is the Go object behind any of the provider's handles.
func goObject(h C.uintptr_t) fi.FID {
	if h == 0 {
		return nil
	}
	switch w := cgo.Handle(h).Value().(type) {
	case *provDomain:
		return w.d
	case *provAV:
		return w.a
	case *provEQ:
		return w.q
	case *provCQ:
		return w.q
	case *provCntr:
		return w.c
	case *provMR:
		return w.m
	case *provEP:
		return w.ep
	case *provWait:
		return w.s
	case *provPoll:
		return w.p
	}
	return nil
}

var _ = eq.Entry{}
