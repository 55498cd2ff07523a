package mr

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/internal/memorder"
)

// tableLock is the Table's lock. It differs from sync.Mutex in its
// release: Unlock is a release store (memorder: a MOV on x86-64, as the
// kernel's spin_unlock is), where sync.Mutex's is a locked add. A reg+close
// takes the lock twice, and its locked instructions were a third of its
// cost (five of them: each lock's acquire and release, and the claim of
// the kernel table slot); see MR.Close for the other one this saves.
//
// A release store cannot tell whether someone waits, so waiters do not
// park to be woken: they spin briefly, then yield (runtime.Gosched), then
// sleep with a backoff up to lockSleepMax, polling the word. Contention
// is rare (a domain's registrations and closes from several threads at
// once; Refresh holds the lock while it faults pages in), and a waiter
// costs at most that sleep in added latency. While anyone waits, Lock's
// fast path steps aside (waiters > 0), so a thread that registers and
// closes in a tight loop does not starve a sleeping waiter.
//
// An Unlock's store becomes visible to other CPUs a moment after it
// returns; what must be visible before a call returns (a closed region's
// state and kernel slot) is ordered by a locked instruction the caller
// takes after writing it: UnlockFenced, or the acquire of the lock itself
// (MR.Close's fast path).
type tableLock struct {
	held    uint32       // 1 while held
	waiters atomic.Int32 // goroutines in lockSlow
}

// lockSleepMax bounds a waiter's sleep between two polls of the lock.
const lockSleepMax = 200 * time.Microsecond

// Lock takes the lock (one compare-and-swap when uncontended).
func (l *tableLock) Lock() {
	if l.waiters.Load() == 0 && atomic.CompareAndSwapUint32(&l.held, 0, 1) {
		return
	}
	l.lockSlow()
}

func (l *tableLock) lockSlow() {
	l.waiters.Add(1)
	defer l.waiters.Add(-1)
	sleep := time.Microsecond
	for i := 0; ; i++ {
		if atomic.LoadUint32(&l.held) == 0 && atomic.CompareAndSwapUint32(&l.held, 0, 1) {
			return
		}
		switch {
		case i < 32: // the holder is likely running: its sections are short
		case i < 64:
			runtime.Gosched()
		default:
			time.Sleep(sleep)
			sleep = min(2*sleep, lockSleepMax)
		}
	}
}

// Unlock releases the lock with a release store: every store of the
// section is ordered before it, none is made visible to other CPUs by it.
func (l *tableLock) Unlock() { memorder.StoreRelease32(&l.held, 0) }

// UnlockFenced releases the lock with a locked instruction (sync/atomic's
// store, an XCHG on x86-64): every store of the section is visible to
// every CPU when it returns.
func (l *tableLock) UnlockFenced() { atomic.StoreUint32(&l.held, 0) }
