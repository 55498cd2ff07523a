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

// The fi_msg and fi_tagged entries (msg.c, tagged.c). Each C call maps
// to the Go call of the same name: fi_send to Endpoint.Send, fi_tsendv
// to TSendV, fi_recvmsg to RecvMsg, and so on; the buffers are the
// application's, used in place.

// Modes of the send, receive and RMA entries (xdpfab.h), and the tagged
// bit added to them.
const (
	modePlain      = C.XF_PLAIN
	modeData       = C.XF_DATA
	modeInject     = C.XF_INJECT
	modeInjectData = C.XF_INJECTDATA
	modeMsg        = C.XF_MSG
	modeTagged     = C.XF_TAGGED
)

// iovecs views n C iovecs as Go slices over the application's memory.
// More than fabric.IovLimit is FI_EINVAL (the Go call would say the
// same; checking first bounds what is built here).
func iovecs(p *C.struct_iovec, n C.size_t) ([][]byte, error) {
	if n > fabric.IovLimit || (p == nil && n > 0) {
		return nil, fmt.Errorf("%d iovecs (iov_limit %d): %w", n, fabric.IovLimit, fi.EINVAL)
	}
	out := make([][]byte, n)
	for i, v := range unsafe.Slice(p, n) {
		out[i] = cBytes(v.iov_base, v.iov_len)
	}
	return out, nil
}

//export xfgo_ep_send
func xfgo_ep_send(h C.uintptr_t, buf unsafe.Pointer, length C.size_t, desc C.uintptr_t, dest C.fi_addr_t,
	data, tag C.uint64_t, context unsafe.Pointer, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || (buf == nil && length > 0) {
		return -C.FI_EINVAL
	}
	b, d, to, ctx := cBytes(buf, length), mrDesc(desc), fi.Addr(dest), ctxOf(context)
	var err error
	switch mode {
	case modePlain:
		err = pe.ep.Send(b, d, to, ctx)
	case modeData:
		err = pe.ep.SendData(b, d, uint64(data), to, ctx)
	case modeInject:
		err = pe.ep.Inject(b, to)
	case modeInjectData:
		err = pe.ep.InjectData(b, uint64(data), to)
	case modePlain | modeTagged:
		err = pe.ep.TSend(b, d, to, uint64(tag), ctx)
	case modeData | modeTagged:
		err = pe.ep.TSendData(b, d, uint64(data), to, uint64(tag), ctx)
	case modeInject | modeTagged:
		err = pe.ep.TInject(b, to, uint64(tag))
	case modeInjectData | modeTagged:
		err = pe.ep.TInjectData(b, uint64(data), to, uint64(tag))
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}

//export xfgo_ep_sendv
func xfgo_ep_sendv(h C.uintptr_t, iov *C.struct_iovec, desc *unsafe.Pointer, count C.size_t, dest C.fi_addr_t,
	data, tag, flags C.uint64_t, context unsafe.Pointer, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	v, err := iovecs(iov, count)
	if err != nil {
		return errno[C.ssize_t](err)
	}
	ds, to, ctx := descs(desc, count), fi.Addr(dest), ctxOf(context)
	switch mode {
	case modePlain:
		err = pe.ep.SendV(v, ds, to, ctx)
	case modeMsg:
		err = pe.ep.SendMsg(&fabric.Msg{MsgIOV: v, Desc: ds, Addr: to, Context: ctx, Data: uint64(data)}, fi.Flags(flags))
	case modePlain | modeTagged:
		err = pe.ep.TSendV(v, ds, to, uint64(tag), ctx)
	case modeMsg | modeTagged:
		err = pe.ep.TSendMsg(&fabric.MsgTagged{MsgIOV: v, Desc: ds, Addr: to, Tag: uint64(tag), Context: ctx,
			Data: uint64(data)}, fi.Flags(flags))
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}

//export xfgo_ep_recv
func xfgo_ep_recv(h C.uintptr_t, buf unsafe.Pointer, length C.size_t, desc C.uintptr_t, src C.fi_addr_t,
	tag, ignore C.uint64_t, context unsafe.Pointer, tagged C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || (buf == nil && length > 0) {
		return -C.FI_EINVAL
	}
	b, d, from, ctx := cBytes(buf, length), mrDesc(desc), fi.Addr(src), ctxOf(context)
	if tagged != 0 {
		return errno[C.ssize_t](pe.ep.TRecv(b, d, from, uint64(tag), uint64(ignore), ctx))
	}
	return errno[C.ssize_t](pe.ep.Recv(b, d, from, ctx))
}

//export xfgo_ep_recvv
func xfgo_ep_recvv(h C.uintptr_t, iov *C.struct_iovec, desc *unsafe.Pointer, count C.size_t, src C.fi_addr_t,
	tag, ignore, flags C.uint64_t, context unsafe.Pointer, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil {
		return -C.FI_EINVAL
	}
	v, err := iovecs(iov, count)
	if err != nil {
		return errno[C.ssize_t](err)
	}
	ds, from, ctx := descs(desc, count), fi.Addr(src), ctxOf(context)
	switch mode {
	case modePlain:
		err = pe.ep.RecvV(v, ds, from, ctx)
	case modeMsg:
		err = pe.ep.RecvMsg(&fabric.Msg{MsgIOV: v, Desc: ds, Addr: from, Context: ctx}, fi.Flags(flags))
	case modePlain | modeTagged:
		err = pe.ep.TRecvV(v, ds, from, uint64(tag), uint64(ignore), ctx)
	case modeMsg | modeTagged:
		err = pe.ep.TRecvMsg(&fabric.MsgTagged{MsgIOV: v, Desc: ds, Addr: from, Tag: uint64(tag),
			Ignore: uint64(ignore), Context: ctx}, fi.Flags(flags))
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}
