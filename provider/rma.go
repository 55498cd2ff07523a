package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// The fi_rma entries (rma.c): fi_read to Endpoint.Read, fi_writev to
// WriteV, fi_writemsg to WriteMsg, ...; local buffers are the
// application's, used in place.

//export xfgo_ep_rma
func xfgo_ep_rma(h C.uintptr_t, write C.int, buf unsafe.Pointer, length C.size_t, desc C.uintptr_t, peer C.fi_addr_t,
	addr, key, data C.uint64_t, context unsafe.Pointer, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || (buf == nil && length > 0) {
		return -C.FI_EINVAL
	}
	b, d, to, ctx := cBytes(buf, length), mrDesc(desc), fi.Addr(peer), ctxOf(context)
	if write == 0 {
		if mode != modePlain {
			return -C.FI_EINVAL
		}
		return errno[C.ssize_t](pe.ep.Read(b, d, to, uint64(addr), uint64(key), ctx))
	}
	var err error
	switch mode {
	case modePlain:
		err = pe.ep.Write(b, d, to, uint64(addr), uint64(key), ctx)
	case modeData:
		err = pe.ep.WriteData(b, d, uint64(data), to, uint64(addr), uint64(key), ctx)
	case modeInject:
		err = pe.ep.InjectWrite(b, to, uint64(addr), uint64(key))
	case modeInjectData:
		err = pe.ep.InjectWriteData(b, uint64(data), to, uint64(addr), uint64(key))
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}

// rmaIovs reads n C fi_rma_iovs (more than fabric.RMAIovLimit is
// FI_EINVAL, checked again by Go).
func rmaIovs(p *C.struct_fi_rma_iov, n C.size_t) ([]fabric.RMAIov, error) {
	if n > fabric.RMAIovLimit || (p == nil && n > 0) {
		return nil, fmt.Errorf("%d rma iovecs (rma_iov_limit %d): %w", n, fabric.RMAIovLimit, fi.EINVAL)
	}
	out := make([]fabric.RMAIov, n)
	for i, r := range unsafe.Slice(p, n) {
		out[i] = fabric.RMAIov{Addr: uint64(r.addr), Len: int(r.len), Key: uint64(r.key)}
	}
	return out, nil
}

//export xfgo_ep_rmav
func xfgo_ep_rmav(h C.uintptr_t, write C.int, iov *C.struct_iovec, desc *unsafe.Pointer, count C.size_t,
	peer C.fi_addr_t, rmaIov *C.struct_fi_rma_iov, rmaCount C.size_t, data, flags C.uint64_t,
	context unsafe.Pointer, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	v, err := iovecs(iov, count)
	if err != nil {
		return errno[C.ssize_t](err)
	}
	r, err := rmaIovs(rmaIov, rmaCount)
	if err != nil {
		return errno[C.ssize_t](err)
	}
	ds, to, ctx := descs(desc, count), fi.Addr(peer), ctxOf(context)
	switch {
	case mode == modePlain && len(r) == 1 && write != 0:
		err = pe.ep.WriteV(v, ds, to, r[0].Addr, r[0].Key, ctx)
	case mode == modePlain && len(r) == 1:
		err = pe.ep.ReadV(v, ds, to, r[0].Addr, r[0].Key, ctx)
	case mode == modeMsg && write != 0:
		err = pe.ep.WriteMsg(&fabric.MsgRMA{MsgIOV: v, Desc: ds, Addr: to, RMAIOV: r, Context: ctx, Data: uint64(data)},
			fi.Flags(flags))
	case mode == modeMsg:
		err = pe.ep.ReadMsg(&fabric.MsgRMA{MsgIOV: v, Desc: ds, Addr: to, RMAIOV: r, Context: ctx, Data: uint64(data)},
			fi.Flags(flags))
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}
