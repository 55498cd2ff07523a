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

// Modes of xfgo_ep_tsend (tagged.c).
const (
	tmodePlain      = 0
	tmodeData       = 1
	tmodeInject     = 2
	tmodeInjectData = 3
)

//export xfgo_ep_tsend
func xfgo_ep_tsend(h C.uintptr_t, buf unsafe.Pointer, length C.size_t, desc C.uintptr_t, dest C.fi_addr_t,
	tag, data C.uint64_t, context unsafe.Pointer, mode C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || (buf == nil && length > 0) {
		return -C.FI_EINVAL
	}
	b := cBytes(buf, length)
	var err error
	switch mode {
	case tmodePlain:
		err = pe.ep.TSend(b, mrDesc(desc), fi.Addr(dest), uint64(tag), ctxOf(context))
	case tmodeData:
		err = pe.ep.TSendData(b, mrDesc(desc), uint64(data), fi.Addr(dest), uint64(tag), ctxOf(context))
	case tmodeInject:
		err = pe.ep.TInject(b, fi.Addr(dest), uint64(tag))
	case tmodeInjectData:
		err = pe.ep.TInjectData(b, uint64(data), fi.Addr(dest), uint64(tag))
	default:
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](err)
}

//export xfgo_ep_trecv
func xfgo_ep_trecv(h C.uintptr_t, buf unsafe.Pointer, length C.size_t, desc C.uintptr_t, src C.fi_addr_t,
	tag, ignore C.uint64_t, context unsafe.Pointer) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || (buf == nil && length > 0) {
		return -C.FI_EINVAL
	}
	return errno[C.ssize_t](pe.ep.TRecv(cBytes(buf, length), mrDesc(desc), fi.Addr(src), uint64(tag), uint64(ignore), ctxOf(context)))
}

// xfgo_ep_tmsg serves fi_tsendv/fi_tsendmsg (send != 0) and
// fi_trecvv/fi_trecvmsg: msg is the caller's fi_msg_tagged (built by C
// for the vector forms, which have no flags argument and take the
// endpoint's op_flags: vector != 0).
//
//export xfgo_ep_tmsg
func xfgo_ep_tmsg(h C.uintptr_t, send C.int, msg *C.struct_fi_msg_tagged, flags C.uint64_t, vector C.int) (ret C.ssize_t) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || msg == nil {
		return -C.FI_EINVAL
	}
	iov, err := iovecs(msg.msg_iov, msg.iov_count)
	if err != nil {
		return errno[C.ssize_t](err)
	}
	m := fabric.MsgTagged{MsgIOV: iov, Desc: descs(msg.desc, msg.iov_count), Addr: fi.Addr(msg.addr),
		Tag: uint64(msg.tag), Ignore: uint64(msg.ignore), Context: ctxOf(msg.context), Data: uint64(msg.data)}
	if msg.desc == nil {
		m.Desc = nil
	}
	if vector != 0 {
		if send != 0 {
			return errno[C.ssize_t](pe.ep.TSendV(m.MsgIOV, m.Desc, m.Addr, m.Tag, m.Context))
		}
		return errno[C.ssize_t](pe.ep.TRecvV(m.MsgIOV, m.Desc, m.Addr, m.Tag, m.Ignore, m.Context))
	}
	if send != 0 {
		return errno[C.ssize_t](pe.ep.TSendMsg(&m, fi.Flags(flags)))
	}
	return errno[C.ssize_t](pe.ep.TRecvMsg(&m, fi.Flags(flags)))
}

// iovecs views a C iovec array as the application's buffers, in place.
func iovecs(p *C.struct_iovec, n C.size_t) ([][]byte, error) {
	if n > fabric.IovLimit || (p == nil && n > 0) {
		return nil, fmt.Errorf("%d iovecs: %w", n, fi.EINVAL)
	}
	out := make([][]byte, n)
	for i, v := range unsafe.Slice(p, n) {
		if v.iov_base == nil && v.iov_len > 0 {
			return nil, fmt.Errorf("iovec %d: NULL base: %w", i, fi.EINVAL)
		}
		out[i] = cBytes(v.iov_base, v.iov_len)
	}
	return out, nil
}
