package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// provPoll is the Go side of a struct xf_poll: a domain's poll set
// (fi_poll_open), see fabric.PollSet.
type provPoll struct {
	p *fabric.PollSet
	c *C.struct_fid_poll
}

//export xfgo_poll_open
func xfgo_poll_open(h C.uintptr_t, attr *C.struct_fi_poll_attr, out **C.struct_fid_poll) (ret C.int) {
	defer catch(&ret)
	pd := handleOf[provDomain](h)
	if pd == nil || out == nil {
		return -C.FI_EINVAL
	}
	var ga fabric.PollAttr
	if attr != nil { // NULL: no flags, as a zeroed attr
		ga.Flags = fi.Flags(attr.flags)
	}
	ps, err := pd.d.PollOpen(ga)
	if err != nil {
		return errno[C.int](err)
	}
	pp := &provPoll{p: ps}
	p, _ := register(ps, pp, func(h C.uintptr_t) unsafe.Pointer { return unsafe.Pointer(C.xf_poll_new(h)) })
	if p == nil {
		ps.Close()
		return -C.FI_ENOMEM
	}
	pp.c = (*C.struct_fid_poll)(p)
	*out = pp.c
	return 0
}

//export xfgo_poll_close
func xfgo_poll_close(h C.uintptr_t) (ret C.int) {
	defer catch(&ret)
	pp := handleOf[provPoll](h)
	if pp == nil {
		return -C.FI_EINVAL
	}
	if err := pp.p.Close(); err != nil {
		return errno[C.int](err)
	}
	unregister(pp.p, h, unsafe.Pointer(pp.c))
	return 0
}

// xfgo_poll_update is fi_poll_add (del 0) and fi_poll_del (del 1); obj is
// the handle of the event fid, 0 for NULL or a fid not xdpfab's
// (FI_EINVAL).
//
//export xfgo_poll_update
func xfgo_poll_update(h, obj C.uintptr_t, flags C.uint64_t, del C.int) (ret C.int) {
	defer catch(&ret)
	pp := handleOf[provPoll](h)
	o := goObject(obj)
	if pp == nil || o == nil {
		return -C.FI_EINVAL
	}
	if del != 0 {
		return errno[C.int](pp.p.Del(o, fi.Flags(flags)))
	}
	return errno[C.int](pp.p.Add(o, fi.Flags(flags)))
}

// pollScratch holds the contexts of one fi_poll on their way to the
// application's array.
var pollScratch = sync.Pool{New: func() any { return new([]any) }}

// xfgo_poll is fi_poll: the number of contexts written, 0 for none.
//
//export xfgo_poll
func xfgo_poll(h C.uintptr_t, context *unsafe.Pointer, count C.int) (ret C.int) {
	defer catch(&ret)
	pp := handleOf[provPoll](h)
	if pp == nil || count < 0 || (context == nil && count > 0) {
		return -C.FI_EINVAL
	}
	// No more contexts than members can come back: the scratch array
	// stays small whatever count the application passes.
	n := min(int(count), pp.p.Len())
	sp := pollScratch.Get().(*[]any)
	defer pollScratch.Put(sp)
	if cap(*sp) < n {
		*sp = make([]any, n)
	}
	ctx := (*sp)[:n]
	got, err := pp.p.Poll(ctx)
	if err != nil {
		return errno[C.int](err)
	}
	dst := unsafe.Slice(context, n)
	for i := 0; i < got; i++ {
		dst[i] = cCtx(ctx[i])
		ctx[i] = nil
	}
	return C.int(got)
}
