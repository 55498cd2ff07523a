package wait_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// counterQueue shows how a queue (a CQ, a counter) uses this package: its
// own Object for FI_WAIT_FD / MUTEX_COND / YIELD / UNSPEC, or a Set it
// joins for FI_WAIT_SET.
type counterQueue struct {
	obj *wait.Object // nil for FI_WAIT_NONE and FI_WAIT_SET
	set *wait.Set    // FI_WAIT_SET only

	mu sync.Mutex
	n  int // guarded by mu: entries queued
}

func openCounterQueue(kind fi.WaitObj, set *wait.Set) (*counterQueue, error) {
	q := &counterQueue{}
	switch kind {
	case fi.WaitNone:
	case fi.WaitSet:
		if err := set.Add((*counterMember)(q)); err != nil {
			return nil, err
		}
		q.set = set
	default:
		obj, err := wait.NewObject(kind)
		if err != nil {
			return nil, err
		}
		q.obj = obj
	}
	return q, nil
}

// push publishes under the lock, then signals outside it.
func (q *counterQueue) push() {
	q.mu.Lock()
	q.n++
	q.mu.Unlock()
	if q.obj != nil {
		q.obj.Signal()
	} else if q.set != nil {
		q.set.Signal()
	}
}

func (q *counterQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n > 0
}

func (q *counterQueue) read() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return false
	}
	q.n--
	return true
}

// sread is fi_cq_sread's shape: wait until readable, then read.
func (q *counterQueue) sread(timeout time.Duration) error {
	if err := q.obj.Wait(timeout, q.pending); err != nil {
		return fi.EAGAIN
	}
	if !q.read() {
		return fi.EAGAIN
	}
	return nil
}

// TryWait is fi_trywait: re-arm first, then check.
func (q *counterQueue) TryWait() error {
	if q.set != nil {
		return q.set.TryWait()
	}
	q.obj.Reset()
	if q.pending() {
		return fi.EAGAIN
	}
	return nil
}

// close leaves the set or releases the object (outside q.mu).
func (q *counterQueue) close() error {
	if q.set != nil {
		return q.set.Remove((*counterMember)(q))
	}
	if q.obj != nil {
		return q.obj.Close()
	}
	return nil
}

// counterMember joins a Set without exporting Pending on the queue.
type counterMember counterQueue

func (m *counterMember) Pending() bool { return (*counterQueue)(m).pending() }

func Example() {
	// A queue with its own eventfd.
	q, _ := openCounterQueue(fi.WaitFD, nil)
	var fd int
	_ = q.obj.Control(wait.GetWait, &fd)
	fmt.Println("trywait on empty:", q.TryWait())
	go q.push()
	fmt.Println("sread:", q.sread(time.Second))
	fmt.Println("sread on empty:", q.sread(10*time.Millisecond))
	_ = q.close()

	// Two queues in one wait set.
	set, _ := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	a, _ := openCounterQueue(fi.WaitSet, set)
	b, _ := openCounterQueue(fi.WaitSet, set)
	fmt.Println("wait, nothing pending:", set.Wait(10))
	go b.push()
	fmt.Println("wait:", set.Wait(-1), "a:", a.pending(), "b:", b.pending())
	fmt.Println("close with members:", set.Close())
	_, _ = a.close(), b.close()
	fmt.Println("close:", set.Close())
	// Output:
	// trywait on empty: <nil>
	// sread: <nil>
	// sread on empty: resource temporarily unavailable
	// wait, nothing pending: wait: 10 ms: connection timed out
	// wait: <nil> a: false b: true
	// close with members: wait close: 2 member(s) still attached: device or resource busy
	// close: <nil>
}
