package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// provEP is the Go side of a struct xf_ep.
type provEP struct {
	ep      *fabric.Endpoint
	c       *C.struct_fid_ep
	opFlags fi.Flags // tx_attr.op_flags: the flags of calls without flags

	mu sync.Mutex
	eq *eq.EQ // bound EQ (an RDM endpoint reports no CM events into it)
}

//export xfgo_endpoint
func xfgo_endpoint(h C.uintptr_t, info *C.struct_fi_info, out **C.struct_fid_ep, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || info == nil || out == nil {
		return -C.FI_EINVAL
	}
	attr, err := pd.d.EndpointAttrFromInfo(infoFromC(info))
	if err != nil {
		return errno[C.int](err)
	}
	// An RDM endpoint receives from peers it has not inserted (fabtests and
	// MPI learn addresses from a first message, FI_SOURCE); their
	// completions report FI_ADDR_NOTAVAIL as source. See the package doc.
	attr.AcceptUnknown = true
	ep, err := pd.d.Endpoint(attr, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pe := &provEP{ep: ep, opFlags: attr.OpFlags}
	p, _ := register(ep, pe, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_ep_new(h, context)) })
	if p == nil {
		ep.Close()
		return -C.FI_ENOMEM
	}
	pe.c = (*C.struct_fid_ep)(p)
	*out = pe.c
	return 0
}

//export xfgo_ep_close
func xfgo_ep_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	if err := pe.ep.Close(); err != nil {
		return errno[C.int](err)
	}
	pe.mu.Lock()
	if pe.eq != nil {
		pe.eq.Unref(pe.ep)
	}
	pe.mu.Unlock()
	unregister(pe.ep, h, unsafe.Pointer(pe.c))
	return 0
}

//export xfgo_ep_bind
func xfgo_ep_bind(h, obj C.uintptr_t, flags C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	target := goObject(obj)
	if pe == nil || target == nil {
		return -C.FI_EINVAL
	}
	if q, ok := target.(*eq.EQ); ok {
		// An RDM endpoint has no connection events; the binding is
		// accepted (fabtests and MPI make it) and holds the EQ open.
		pe.mu.Lock()
		defer pe.mu.Unlock()
		if pe.eq != nil {
			return -C.FI_EINVAL
		}
		if err := q.Ref(pe.ep); err != nil {
			return errno[C.int](err)
		}
		pe.eq = q
		return 0
	}
	return errno[C.int](pe.ep.Bind(target, fi.Flags(flags)))
}

//export xfgo_ep_control
func xfgo_ep_control(h C.uintptr_t, command C.int, arg unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	switch command {
	case C.FI_ENABLE:
		if err := pe.ep.Enable(); err != nil {
			return errno[C.int](err)
		}
		settleHeap()
		return 0
	}
	return -C.FI_ENOSYS
}

//export xfgo_ep_cancel
func xfgo_ep_cancel(h C.uintptr_t, context unsafe.Pointer) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](pe.ep.Cancel(ctxOf(context)))
}

// optInt reports whether an FI_OPT_ENDPOINT option is an int in C
// (FI_OPT_FI_HMEM_P2P); the others Endpoint.GetOpt knows are size_t.
func optInt(name C.int) bool { return name == C.FI_OPT_FI_HMEM_P2P }

//export xfgo_ep_getopt
func xfgo_ep_getopt(h C.uintptr_t, level, name C.int, val unsafe.Pointer, length *C.size_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || val == nil || length == nil {
		return -C.FI_EINVAL
	}
	lvl, opt := fabric.OptLevel(level), fabric.OptName(name)
	if optInt(name) {
		if *length < C.sizeof_int {
			*length = C.sizeof_int
			return -C.FI_ETOOSMALL
		}
		var v int
		if err := pe.ep.GetOpt(lvl, opt, &v); err != nil {
			return errno[C.int](err)
		}
		*(*C.int)(val), *length = C.int(v), C.sizeof_int
		return 0
	}
	var v uint64
	if err := pe.ep.GetOpt(lvl, opt, &v); err != nil {
		return errno[C.int](err)
	}
	if *length < C.sizeof_size_t {
		*length = C.sizeof_size_t
		return -C.FI_ETOOSMALL
	}
	*(*C.size_t)(val), *length = C.size_t(v), C.sizeof_size_t
	return 0
}

//export xfgo_ep_setopt
func xfgo_ep_setopt(h C.uintptr_t, level, name C.int, val unsafe.Pointer, length C.size_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || val == nil {
		return -C.FI_EINVAL
	}
	lvl, opt := fabric.OptLevel(level), fabric.OptName(name)
	if optInt(name) {
		if length != C.sizeof_int {
			return -C.FI_EINVAL
		}
		return errno[C.int](pe.ep.SetOpt(lvl, opt, int(*(*C.int)(val))))
	}
	if length != C.sizeof_size_t {
		// The option's own error first (FI_ENOPROTOOPT for one xdpfab
		// does not have), then the length's.
		if err := pe.ep.SetOpt(lvl, opt, nil); err != nil && !errors.Is(err, fi.EINVAL) {
			return errno[C.int](err)
		}
		return -C.FI_EINVAL
	}
	return errno[C.int](pe.ep.SetOpt(lvl, opt, uint64(*(*C.size_t)(val))))
}

//export xfgo_ep_getname
func xfgo_ep_getname(h C.uintptr_t, addr unsafe.Pointer, addrlen *C.size_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || addrlen == nil {
		return -C.FI_EINVAL
	}
	name := pe.ep.GetName()
	have := int(*addrlen)
	*addrlen = C.size_t(len(name))
	if addr == nil || have < len(name) {
		return -C.FI_ETOOSMALL
	}
	copy(unsafe.Slice((*byte)(addr), have), name)
	return 0
}

// cBytes views n bytes of C memory at p (nil for none): the application's
// buffer, used in place.
func cBytes(p unsafe.Pointer, n C.size_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// Atomic classes (endpoint.c).
const (
	classBase    = 0
	classFetch   = 1
	classCompare = 2
)

// iocs views C fi_ioc arrays as fabric.IOCs over the application's memory.
func iocs(p *C.struct_fi_ioc, n C.size_t, size int) ([]fabric.IOC, error) {
	if n > fabric.IovLimit || (p == nil && n > 0) {
		return nil, fmt.Errorf("%d iovecs: %w", n, fi.EINVAL)
	}
	out := make([]fabric.IOC, n)
	for i, v := range unsafe.Slice(p, n) {
		out[i] = fabric.IOC{Buf: cBytes(v.addr, v.count*C.size_t(size)), Count: int(v.count)}
	}
	return out, nil
}

func descs(p *unsafe.Pointer, n C.size_t) []mr.Desc {
	out := make([]mr.Desc, n)
	if p == nil {
		return out
	}
	for i, d := range unsafe.Slice(p, n) {
		out[i] = mrDesc(C.xf_desc_handle(d))
	}
	return out
}

//export xfgo_ep_atomic
func xfgo_ep_atomic(h C.uintptr_t, class C.int, msg *C.struct_fi_msg_atomic, comparev *C.struct_fi_ioc,
	compareDesc *unsafe.Pointer, compareCount C.size_t, resultv *C.struct_fi_ioc, resultDesc *unsafe.Pointer,
	resultCount C.size_t, flags C.uint64_t, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || msg == nil {
		return -C.FI_EINVAL
	}
	if msg.rma_iov_count != 1 || msg.rma_iov == nil {
		return -C.FI_EINVAL
	}
	dt := fatomic.Datatype(msg.datatype)
	size := fatomic.Size(dt)
	iov, err := iocs(msg.msg_iov, msg.iov_count, size)
	if err != nil {
		return errno[C.ssize_t](err)
	}
	r := msg.rma_iov
	m := fabric.MsgAtomic{MsgIOV: iov, Desc: descs(msg.desc, msg.iov_count), Addr: fi.Addr(msg.addr),
		RMAIOV:   []fabric.RMAIOC{{Addr: uint64(r.addr), Count: int(r.count), Key: uint64(r.key)}},
		Datatype: dt, Op: fatomic.Op(msg.op), Context: ctxOf(msg.context), Data: uint64(msg.data)}
	f := fi.Flags(flags)
	if mode != modeMsg {
		f = pe.opFlags
	}
	switch class {
	case classBase:
		if mode == modeInject {
			if len(iov) != 1 {
				return -C.FI_EINVAL
			}
			err = pe.ep.InjectAtomic(iov[0].Buf, iov[0].Count, m.Addr, m.RMAIOV[0].Addr, m.RMAIOV[0].Key, dt, m.Op)
		} else {
			err = pe.ep.AtomicMsg(&m, f)
		}
	case classFetch, classCompare:
		res, e := iocs(resultv, resultCount, size)
		if e != nil {
			return errno[C.ssize_t](e)
		}
		if class == classFetch {
			err = pe.ep.FetchAtomicMsg(&m, res, descs(resultDesc, resultCount), f)
		} else {
			cmp, e := iocs(comparev, compareCount, size)
			if e != nil {
				return errno[C.ssize_t](e)
			}
			err = pe.ep.CompareAtomicMsg(&m, cmp, descs(compareDesc, compareCount), res, descs(resultDesc, resultCount), f)
		}
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}

//export xfgo_ep_atomicvalid
func xfgo_ep_atomicvalid(h C.uintptr_t, class C.int, dt C.enum_fi_datatype, op C.enum_fi_op, count *C.size_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || count == nil {
		return -C.FI_EINVAL
	}
	var n int
	var err error
	switch class {
	case classBase:
		n, err = pe.ep.AtomicValid(fatomic.Datatype(dt), fatomic.Op(op))
	case classFetch:
		n, err = pe.ep.FetchAtomicValid(fatomic.Datatype(dt), fatomic.Op(op))
	default:
		n, err = pe.ep.CompareAtomicValid(fatomic.Datatype(dt), fatomic.Op(op))
	}
	if err != nil {
		return errno[C.int](err)
	}
	*count = C.size_t(n)
	return 0
}
