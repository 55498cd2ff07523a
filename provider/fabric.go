package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/wait"
)

// provFabric is the Go side of a struct xf_fabric.
type provFabric struct {
	f *fabric.Fabric
	c *C.struct_fid_fabric
	// children counts the domains, EQs and wait sets open on the fabric:
	// fi_close fails with FI_EBUSY while any is (as libfabric's util
	// fabric does), since they keep using the fabric's fid.
	children atomic.Int32
}

// handleOf returns the object behind a C handle, or nil when h is not a
// live handle of a T.
func handleOf[T any](h C.uintptr_t) *T {
	if h == 0 {
		return nil
	}
	v, _ := cgo.Handle(h).Value().(*T)
	return v
}

//export xfgo_fabric
func xfgo_fabric(attr *C.struct_fi_fabric_attr, out **C.struct_fid_fabric, context unsafe.Pointer) (ret C.int) {
	defer catch(&ret)
	if attr == nil || out == nil {
		return -C.FI_EINVAL
	}
	f, err := fabric.OpenFabricInfo(&fabric.FabricAttr{Name: goStr(attr.name), ProvName: goStr(attr.prov_name),
		ProvVersion: uint32(attr.prov_version), APIVersion: uint32(attr.api_version)}, ctxOf(context))
	if err != nil {
		return errno[C.int](err)
	}
	pf := &provFabric{f: f}
	h := cgo.NewHandle(pf)
	pf.c = C.xf_fabric_new(C.uintptr_t(h), context)
	if pf.c == nil {
		h.Delete()
		return -C.FI_ENOMEM
	}
	*out = pf.c
	return 0
}

//export xfgo_fabric_close
func xfgo_fabric_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pf := handleOf[provFabric](h)
	if pf == nil {
		return -C.FI_EINVAL
	}
	if pf.children.Load() > 0 {
		return -C.FI_EBUSY
	}
	if err := pf.f.Close(); err != nil {
		return errno[C.int](err)
	}
	cgo.Handle(h).Delete()
	C.xf_fabric_free(pf.c)
	return 0
}

//export xfgo_fabric_trywait
func xfgo_fabric_trywait(fids **C.struct_fid, count C.int) (ret C.int) {
	defer catch(&ret)
	if count < 0 || (fids == nil && count > 0) {
		return -C.FI_EINVAL
	}
	var objs []wait.TryWaiter
	for _, f := range unsafe.Slice(fids, count) {
		w, ok := goObject(C.xf_fid_handle(f)).(wait.TryWaiter)
		if !ok {
			return -C.FI_EINVAL
		}
		objs = append(objs, w)
	}
	return errno[C.int](wait.TryWait(objs...))
}
