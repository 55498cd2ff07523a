package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// provWait is the Go side of a struct xf_wait: a wait set (fi_wait_open)
// that EQs, CQs and counters opened with FI_WAIT_SET join.
type provWait struct {
	s      *wait.Set
	c      *C.struct_fid_wait
	parent *provFabric
}

// waitSetOf is the wait set behind one of xdpfab's struct fid_wait, nil
// for NULL or anything else.
func waitSetOf(w *C.struct_fid_wait) *wait.Set {
	if w == nil {
		return nil
	}
	if pw := handleOf[provWait](C.xf_fid_handle(&w.fid)); pw != nil {
		return pw.s
	}
	return nil
}

//export xfgo_wait_open
func xfgo_wait_open(h C.uintptr_t, attr *C.struct_fi_wait_attr, out **C.struct_fid_wait) (ret C.int) {
	defer catch(&ret)
	pf := handleOf[provFabric](h)
	if pf == nil || attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	s, err := wait.Open(wait.Attr{WaitObj: fi.WaitObj(attr.wait_obj), Flags: fi.Flags(attr.flags)}, nil)
	if err != nil {
		return errno[C.int](err)
	}
	pw := &provWait{s: s, parent: pf}
	p, _ := register(s, pw, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_wait_new(h)) })
	if p == nil {
		s.Close()
		return -C.FI_ENOMEM
	}
	pw.c = (*C.struct_fid_wait)(p)
	pf.children.Add(1)
	*out = pw.c
	return 0
}

// xfgo_wait_close fails with FI_EBUSY while a queue is attached.
//
//export xfgo_wait_close
func xfgo_wait_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pw := handleOf[provWait](h)
	if pw == nil {
		return -C.FI_EINVAL
	}
	mc := ownMutexCond(pw.s.Attr().WaitObj, pw.s.Control)
	if err := pw.s.Close(); err != nil {
		return errno[C.int](err)
	}
	releaseMutexCond(mc)
	unregister(pw.s, h, unsafe.Pointer(pw.c))
	pw.parent.children.Add(-1)
	return 0
}

//export xfgo_wait_control
func xfgo_wait_control(h C.uintptr_t, command C.int, arg unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	pw := handleOf[provWait](h)
	if pw == nil {
		return -C.FI_EINVAL
	}
	return waitControl(pw.s.Control, command, arg)
}

// xfgo_wait_wait is fi_wait: 0 once a member has something to read (or
// was signalled), -FI_ETIMEDOUT when timeout passes first.
//
//export xfgo_wait_wait
func xfgo_wait_wait(h C.uintptr_t, timeout C.int) (ret C.int) {
	defer catch(&ret)
	pw := handleOf[provWait](h)
	if pw == nil {
		return -C.FI_EINVAL
	}
	return errno[C.int](pw.s.Wait(int(timeout)))
}
