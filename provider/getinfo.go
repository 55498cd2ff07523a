package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// fi_getinfo is fabric.GetInfo: the hints are read into a fabric.Info
// and each Info answered is written back as a C fi_info (info.go), so
// the C and Go answers are the same by construction (fabric's package doc
// says what is reported and how hints match).

//export xfgo_getinfo
func xfgo_getinfo(version C.uint32_t, node, service *C.char, flags C.uint64_t,
	hints *C.struct_fi_info, info **C.struct_fi_info) (ret C.int) {
	defer catch(&ret)
	if info == nil {
		return -C.FI_EINVAL
	}
	*info = nil
	list, err := fabric.GetInfo(uint32(version), goStr(node), goStr(service), fi.Flags(flags), infoFromC(hints))
	if err != nil {
		logf("getinfo: %v", err)
		return errno[C.int](err)
	}
	var head, tail *C.struct_fi_info
	for _, gi := range list {
		ci := infoToC(gi)
		if ci == nil {
			if head != nil {
				C.xf_freeinfo(head)
			}
			return -C.FI_ENOMEM
		}
		if head == nil {
			head = ci
		} else {
			tail.next = ci
		}
		tail = ci
	}
	*info = head
	return 0
}
