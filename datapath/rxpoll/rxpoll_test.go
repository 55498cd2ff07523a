package rxpoll

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// eventFD is a descriptor the test makes readable at will.
func eventFD(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func signal(t *testing.T, fd int) {
	t.Helper()
	one := [8]byte{1}
	if _, err := unix.Write(fd, one[:]); err != nil {
		t.Fatal(err)
	}
}

// handlerFunc adapts a function to Handler.
type handlerFunc func(events uint32)

func (f handlerFunc) Ready(events uint32) { f(events) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadyAndStop: a handler runs when its descriptor becomes readable,
// again while it stays readable (level triggered), not once drained; the
// last Remove stops the poller and its goroutine.
func TestReadyAndStop(t *testing.T) {
	g0 := runtime.NumGoroutine()
	a, b := eventFD(t), eventFD(t)
	defer unix.Close(a)
	defer unix.Close(b)
	var drained, undrained atomic.Int32
	ra, err := Register(a, handlerFunc(func(ev uint32) {
		var buf [8]byte
		if _, err := unix.Read(a, buf[:]); err == nil {
			drained.Add(1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Register(b, handlerFunc(func(ev uint32) {
		if ev&unix.EPOLLIN != 0 {
			undrained.Add(1) // leaves b readable
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !Running() {
		t.Fatal("poller not running with two registrations")
	}
	signal(t, a)
	waitFor(t, "a's handler", func() bool { return drained.Load() == 1 })
	signal(t, b)
	waitFor(t, "b reported again and again", func() bool { return undrained.Load() >= 3 })
	time.Sleep(20 * time.Millisecond)
	if n := drained.Load(); n != 1 {
		t.Fatalf("drained descriptor reported %d times, want 1", n)
	}
	rb.Remove()
	rb.Remove() // twice: no-op
	n := undrained.Load()
	time.Sleep(20 * time.Millisecond)
	if undrained.Load() != n {
		t.Fatal("handler called after Remove returned")
	}
	if !Running() {
		t.Fatal("poller stopped with a registration left")
	}
	ra.Remove()
	if Running() {
		t.Fatal("poller still running after the last Remove")
	}
	waitFor(t, "the poller's goroutine to end", func() bool { return runtime.NumGoroutine() <= g0 })
	// A new registration starts a new poller.
	var again atomic.Bool
	r, err := Register(a, handlerFunc(func(uint32) {
		var buf [8]byte
		_, _ = unix.Read(a, buf[:])
		again.Store(true)
	}))
	if err != nil {
		t.Fatal(err)
	}
	signal(t, a)
	waitFor(t, "the restarted poller", again.Load)
	r.Remove()
}

// TestRemoveWaitsForHandler: Remove returns only after a run of the
// handler under way has finished.
func TestRemoveWaitsForHandler(t *testing.T) {
	fd := eventFD(t)
	defer unix.Close(fd)
	entered := make(chan struct{})
	var finished atomic.Bool
	r, err := Register(fd, handlerFunc(func(uint32) {
		var buf [8]byte
		_, _ = unix.Read(fd, buf[:])
		close(entered)
		time.Sleep(50 * time.Millisecond)
		finished.Store(true)
	}))
	if err != nil {
		t.Fatal(err)
	}
	signal(t, fd)
	<-entered
	r.Remove()
	if !finished.Load() {
		t.Fatal("Remove returned while the handler was running")
	}
}

// TestRegisterErrors: no descriptor, no handler, a descriptor epoll
// cannot watch: FI_EINVAL / the kernel's errno, and the poller does not
// stay behind.
func TestRegisterErrors(t *testing.T) {
	h := handlerFunc(func(uint32) {})
	if _, err := Register(-1, h); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("fd -1: %v", err)
	}
	fd := eventFD(t)
	defer unix.Close(fd)
	if _, err := Register(fd, nil); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("nil handler: %v", err)
	}
	f, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(f)
	if _, err := Register(f, h); !errors.Is(err, fi.EPERM) {
		t.Fatalf("/dev/null: %v, want FI_EPERM", err)
	}
	if Running() {
		t.Fatal("poller left running by failed registrations")
	}
}

// pollerState returns the scheduling state of the poller's goroutine as
// runtime.Stack prints it ("IO wait" when parked in the netpoller,
// "runnable" or "running" while it spins), "" if there is none.
func pollerState() string {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "rxpoll.(*Poller).run(") {
			head, _, _ := strings.Cut(g, "\n")
			if i, j := strings.Index(head, "["), strings.Index(head, "]"); i >= 0 && j > i {
				state, _, _ := strings.Cut(head[i+1:j], ",")
				return state
			}
		}
	}
	return ""
}

// TestSpinThenPark: with a spin set, the poller keeps looking after a
// round that found a ready descriptor (handlers still run for datagrams
// arriving meanwhile), and parks in the netpoller once the spin has
// passed without one; an idle poller does not spin; Remove stops a
// spinning poller.
func TestSpinThenPark(t *testing.T) {
	const spinFor = 300 * time.Millisecond
	SetSpin(spinFor)
	defer SetSpin(0)
	fd := eventFD(t)
	defer unix.Close(fd)
	var runs atomic.Int32
	r, err := Register(fd, handlerFunc(func(uint32) {
		var buf [8]byte
		_, _ = unix.Read(fd, buf[:])
		runs.Add(1)
	}))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle poller to park", func() bool { return pollerState() == "IO wait" })
	start := time.Now()
	signal(t, fd)
	waitFor(t, "the handler", func() bool { return runs.Load() == 1 })
	time.Sleep(spinFor / 10)
	if s := pollerState(); s == "IO wait" && time.Since(start) < spinFor {
		t.Fatalf("the poller parked %v after a ready round, within its %v spin", time.Since(start), spinFor)
	}
	signal(t, fd)
	waitFor(t, "the handler while spinning", func() bool { return runs.Load() == 2 })
	waitFor(t, "the poller to park after the spin", func() bool { return pollerState() == "IO wait" })
	if d := time.Since(start); d < spinFor {
		t.Fatalf("parked %v after the last ready round, before its %v spin passed", d, spinFor)
	}
	SetSpin(time.Hour) // Remove must not wait for the spin to pass
	signal(t, fd)
	waitFor(t, "the handler after parking", func() bool { return runs.Load() == 3 })
	removed := make(chan struct{})
	go func() { r.Remove(); close(removed) }() // while spinning
	select {
	case <-removed:
	case <-time.After(5 * time.Second):
		t.Fatal("Remove waits for the poller's spin to pass")
	}
	if Running() {
		t.Fatal("poller still running after the last Remove")
	}
	waitFor(t, "the poller's goroutine to end", func() bool { return pollerState() == "" })
}
