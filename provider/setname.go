package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockaddrOf parses a struct sockaddr_in or sockaddr_in6 (the endpoint's
// FI_SOCKADDR_IN/IN6 format, its exact size); ok false for anything else.
func sockaddrOf(b []byte) (netip.AddrPort, bool) {
	if len(b) < 2 {
		return netip.AddrPort{}, false
	}
	family := binary.NativeEndian.Uint16(b)
	switch {
	case family == unix.AF_INET && len(b) == unix.SizeofSockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), true
	case family == unix.AF_INET6 && len(b) == unix.SizeofSockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:4])), true
	}
	return netip.AddrPort{}, false
}

// xfgo_ep_setname is fi_setname on an endpoint: before fi_enable it moves
// the endpoint to the address's port (fabric.Endpoint.SetAddr: the IP must
// be the endpoint's own or unspecified, port 0 keeps the port).
//
//export xfgo_ep_setname
func xfgo_ep_setname(h C.uintptr_t, addr unsafe.Pointer, addrlen C.size_t) (ret C.int) {
	defer catch(&ret)
	pe := handleOf[provEP](h)
	if pe == nil || addr == nil {
		return -C.FI_EINVAL
	}
	ap, ok := sockaddrOf(cBytes(addr, addrlen))
	if !ok {
		return -C.FI_EINVAL
	}
	return errno[C.int](pe.ep.SetAddr(ap))
}
