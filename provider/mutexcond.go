package main

/*
#include <pthread.h>
#include <stdlib.h>
#include <rdma/fi_eq.h>

// xf_mutex_cond is the pthread pair FI_GETWAIT hands out for an object
// opened with FI_WAIT_MUTEX_COND.
struct xf_mutex_cond {
	pthread_mutex_t mutex;
	pthread_cond_t cond;
};

static struct xf_mutex_cond *xf_mc_new(void)
{
	struct xf_mutex_cond *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	if (pthread_mutex_init(&p->mutex, NULL) != 0) {
		free(p);
		return NULL;
	}
	if (pthread_cond_init(&p->cond, NULL) != 0) {
		pthread_mutex_destroy(&p->mutex);
		free(p);
		return NULL;
	}
	return p;
}

// xf_mc_broadcast wakes the threads waiting on the pair. It takes the
// mutex, so a thread that checked under it (fi_trywait) and is about to
// wait cannot miss the wake-up.
static void xf_mc_broadcast(struct xf_mutex_cond *p)
{
	pthread_mutex_lock(&p->mutex);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mutex);
}

static void xf_mc_free(struct xf_mutex_cond *p)
{
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->mutex);
	free(p);
}

static void xf_mc_get(struct xf_mutex_cond *p, struct fi_mutex_cond *out)
{
	out->mutex = &p->mutex;
	out->cond = &p->cond;
}
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// FI_WAIT_MUTEX_COND from C: the Go wait object of an EQ, CQ, counter or
// wait set of that kind has a Go mutex and sync.Cond, which C cannot wait
// on. The first FI_GETWAIT makes a pthread mutex and cond for the object
// (C memory, struct fi_mutex_cond points into it) and registers with the
// object (wait.SetNotify) to broadcast the cond, under its mutex, after
// every signal the Go pair gets: a new completion, event or count, and
// the object's close. An application locks the mutex, calls fi_trywait
// and waits on the cond while it returns 0, as fi_eq(3) describes; the
// broadcast takes the mutex, so no wake-up falls between the check and
// the wait. The pair lives until its object closes. A queue in a wait
// set hands out the set's pair. Under manual progress nothing signals
// while the application sleeps (nothing drives the endpoints), as with
// an fd.

// cMutexCond is one object's pthread pair.
type cMutexCond struct {
	mu sync.Mutex // held while p is used or freed: a signal may race the close
	p  *C.struct_xf_mutex_cond
}

func (c *cMutexCond) notify() {
	c.mu.Lock()
	if c.p != nil {
		C.xf_mc_broadcast(c.p)
	}
	c.mu.Unlock()
}

// mutexConds holds the pairs by the Go object's mutex (what identifies
// the wait object behind a queue or set).
var mutexConds struct {
	sync.Mutex
	m map[*sync.Mutex]*cMutexCond
}

// getMutexCond answers FI_GETWAIT for an object whose wait object is a
// MutexCond: it fills the struct fi_mutex_cond at arg.
func getMutexCond(control func(wait.Command, any) error, arg unsafe.Pointer) C.int {
	var mc wait.MutexCond
	if err := control(wait.GetWait, &mc); err != nil {
		return errno[C.int](err)
	}
	mutexConds.Lock()
	defer mutexConds.Unlock()
	c := mutexConds.m[mc.Mutex]
	if c == nil {
		c = &cMutexCond{p: C.xf_mc_new()}
		if c.p == nil {
			return -C.FI_ENOMEM
		}
		if err := control(wait.SetNotify, c.notify); err != nil {
			C.xf_mc_free(c.p)
			return errno[C.int](err)
		}
		if mutexConds.m == nil {
			mutexConds.m = make(map[*sync.Mutex]*cMutexCond)
		}
		mutexConds.m[mc.Mutex] = c
	}
	C.xf_mc_get(c.p, (*C.struct_fi_mutex_cond)(arg))
	return 0
}

// ownMutexCond is the key of the pair of an object whose own wait object
// (kind) is a MutexCond, nil otherwise; take it before the object closes
// and release it after.
func ownMutexCond(kind fi.WaitObj, control func(wait.Command, any) error) *sync.Mutex {
	if kind != fi.WaitMutexCond {
		return nil
	}
	var mc wait.MutexCond
	if control(wait.GetWait, &mc) != nil {
		return nil
	}
	return mc.Mutex
}

// releaseMutexCond frees the pair of a closed object, if it has one.
func releaseMutexCond(key *sync.Mutex) {
	if key == nil {
		return
	}
	mutexConds.Lock()
	c := mutexConds.m[key]
	delete(mutexConds.m, key)
	mutexConds.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	C.xf_mc_free(c.p)
	c.p = nil
	c.mu.Unlock()
}
