package main

/*
#include <netinet/in.h>
#include "xdpfab.h"
*/
import "C"

import (
	"unsafe"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// provAV is the Go side of a struct xf_av.
type provAV struct {
	a *av.AV
	c *C.struct_fid_av
}

//export xfgo_av_open
func xfgo_av_open(h C.uintptr_t, attr *C.struct_fi_av_attr, out **C.struct_fid_av, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	ga := av.Attr{Type: av.Type(attr._type), RxCtxBits: int(attr.rx_ctx_bits), Count: int(attr.count),
		EPPerNode: int(attr.ep_per_node), MapAddr: uint64(uintptr(attr.map_addr)), Flags: fi.Flags(attr.flags)}
	if attr.name != nil {
		ga.Name = C.GoString(attr.name)
	}
	a, err := pd.d.AVOpen(ga, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pa := &provAV{a: a}
	p, _ := register(a, pa, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_av_new(h, context)) })
	if p == nil {
		a.Close()
		return -C.FI_ENOMEM
	}
	pa.c = (*C.struct_fid_av)(p)
	got := a.Attr()
	C.xf_av_attr_out(attr, C.int(got.Type), C.uint64_t(got.MapAddr))
	*out = pa.c
	return 0
}

//export xfgo_av_close
func xfgo_av_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	if pa == nil {
		return -C.FI_EINVAL
	}
	if err := pa.a.Close(); err != nil {
		return errno[C.int](err)
	}
	unregister(pa.a, h, unsafe.Pointer(pa.c))
	return 0
}

//export xfgo_av_bind
func xfgo_av_bind(h, obj C.uintptr_t, flags C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	pe := handleOf[provEQ](obj)
	if pa == nil || pe == nil {
		return -C.FI_EINVAL
	}
	return errno[C.int](pa.a.Bind(pe.q, fi.Flags(flags)))
}

// addrSize is the size of one address of the AV's format in an
// fi_av_insert array.
func addrSize(f fi.AddrFormat) int {
	switch f {
	case fi.FormatSockaddr6:
		return C.sizeof_struct_sockaddr_in6
	case fi.FormatStr:
		return 0
	}
	return C.sizeof_struct_sockaddr_in
}

func fiAddrs(p *C.fi_addr_t, n int) []fi.Addr {
	if p == nil {
		return nil
	}
	return unsafe.Slice((*fi.Addr)(unsafe.Pointer(p)), n)
}

// insertCtx is an insert call's context for Go: with FI_SYNC_ERR the
// application's int array of n statuses, viewed in place as an []int32
// (so a status written late, after an FI_MORE batch, reaches it too).
func insertCtx(flags C.uint64_t, context unsafe.Pointer, n int) any {
	if fi.Flags(flags)&fi.SYNC_ERR != 0 && context != nil {
		return unsafe.Slice((*int32)(context), n)
	}
	return ctxOf(context)
}

//export xfgo_av_insert
func xfgo_av_insert(h C.uintptr_t, addr unsafe.Pointer, count C.size_t, out *C.fi_addr_t, flags C.uint64_t, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	if pa == nil || (addr == nil && count > 0) || count > 1<<24 {
		return -C.FI_EINVAL
	}
	n := int(count)
	addrs := make([][]byte, n)
	size := addrSize(pa.a.AddrFormat())
	for i := range addrs {
		if size == 0 { // FI_ADDR_STR: an array of C strings
			s := *(**C.char)(unsafe.Add(addr, i*int(unsafe.Sizeof(uintptr(0)))))
			addrs[i] = []byte(C.GoString(s))
			continue
		}
		addrs[i] = unsafe.Slice((*byte)(unsafe.Add(addr, i*size)), size)
	}
	k, err := pa.a.Insert(addrs, fiAddrs(out, n), fi.Flags(flags), insertCtx(flags, context, n))
	if err != nil {
		return errno[C.int](err)
	}
	return C.int(k)
}

//export xfgo_av_insertsym
func xfgo_av_insertsym(h C.uintptr_t, node *C.char, nodecnt C.size_t, service *C.char, svccnt C.size_t,
	out *C.fi_addr_t, flags C.uint64_t, context unsafe.Pointer, svc C.int) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	if pa == nil || node == nil {
		return -C.FI_EINVAL
	}
	var serviceS string
	if service != nil {
		serviceS = C.GoString(service)
	}
	var k int
	var err error
	if svc != 0 {
		k, err = pa.a.InsertSvc(C.GoString(node), serviceS, fiAddrs(out, 1), fi.Flags(flags), insertCtx(flags, context, 1))
	} else {
		if nodecnt > 1<<24 || svccnt > 1<<16 {
			return -C.FI_EINVAL
		}
		k, err = pa.a.InsertSym(C.GoString(node), int(nodecnt), serviceS, int(svccnt),
			fiAddrs(out, int(nodecnt*svccnt)), fi.Flags(flags), insertCtx(flags, context, int(nodecnt*svccnt)))
	}
	if err != nil {
		return errno[C.int](err)
	}
	return C.int(k)
}

//export xfgo_av_remove
func xfgo_av_remove(h C.uintptr_t, addrs *C.fi_addr_t, count C.size_t, flags C.uint64_t) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	if pa == nil || (addrs == nil && count > 0) || count > 1<<24 {
		return -C.FI_EINVAL
	}
	// Remove keeps no reference to the slice; copy it anyway so that the
	// Go side never holds the application's array.
	handles := append([]fi.Addr(nil), fiAddrs(addrs, int(count))...)
	return errno[C.int](pa.a.Remove(handles, fi.Flags(flags)))
}

//export xfgo_av_lookup
func xfgo_av_lookup(h C.uintptr_t, fiAddr C.fi_addr_t, addr unsafe.Pointer, addrlen *C.size_t) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	if pa == nil || addrlen == nil {
		return -C.FI_EINVAL
	}
	var buf []byte
	if addr != nil && *addrlen > 0 {
		buf = unsafe.Slice((*byte)(addr), *addrlen)
	}
	n, err := pa.a.Lookup(fi.Addr(fiAddr), buf)
	if err != nil {
		return errno[C.int](err)
	}
	*addrlen = C.size_t(n)
	return 0
}

//export xfgo_av_straddr
func xfgo_av_straddr(h C.uintptr_t, addr unsafe.Pointer, buf *C.char, length *C.size_t) (ret C.int) {
	defer catch(&ret)
	pa := handleOf[provAV](h)
	if pa == nil || addr == nil || length == nil {
		return -C.FI_EINVAL
	}
	size := addrSize(pa.a.AddrFormat())
	var in []byte
	if size == 0 {
		in = []byte(C.GoString((*C.char)(addr)))
	} else {
		in = unsafe.Slice((*byte)(addr), size)
	}
	var tmp [128]byte
	n, err := pa.a.Straddr(in, tmp[:])
	if err != nil {
		return errno[C.int](err)
	}
	if buf != nil && *length > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), *length)
		k := copy(dst[:len(dst)-1], tmp[:min(n, len(tmp))])
		dst[k] = 0
	}
	*length = C.size_t(n + 1)
	return 0
}
