package wait_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// flag is a Member (and a queue's ready condition) that is pending while
// set.
type flag struct{ on atomic.Bool }

func (f *flag) Pending() bool { return f.on.Load() }

var objectKinds = []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield}

func newObject(t *testing.T, kind fi.WaitObj) *wait.Object {
	t.Helper()
	o, err := wait.NewObject(kind)
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

func pollIn(t *testing.T, fd int) int {
	t.Helper()
	ok, err := wait.PollFD(fd, 0)
	require.NoError(t, err)
	if ok {
		return 1
	}
	return 0
}

func TestNewObjectKinds(t *testing.T) {
	for _, k := range objectKinds {
		o := newObject(t, k)
		require.Equal(t, k, o.Kind())
		var got fi.WaitObj
		require.NoError(t, o.Control(wait.GetWaitObj, &got))
		require.Equal(t, k, got)
	}
	_, err := wait.NewObject(fi.WaitNone)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = wait.NewObject(fi.WaitSet)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = wait.NewObject(fi.WaitPollFD)
	require.ErrorIs(t, err, fi.ENOSYS)
	_, err = wait.NewObject(77)
	require.ErrorIs(t, err, fi.EINVAL)
}

// TestObjectWait: Wait returns nil when ready, FI_ETIMEDOUT when the time
// runs out, and wakes on Signal from another goroutine.
func TestObjectWait(t *testing.T) {
	for _, k := range objectKinds {
		t.Run(k.String(), func(t *testing.T) {
			o := newObject(t, k)
			var f flag
			require.ErrorIs(t, o.Wait(0, f.Pending), fi.ETIMEDOUT)
			start := time.Now()
			require.ErrorIs(t, o.Wait(30*time.Millisecond, f.Pending), fi.ETIMEDOUT)
			require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

			f.on.Store(true)
			require.NoError(t, o.Wait(0, f.Pending))
			require.NoError(t, o.Wait(-1, f.Pending))
			f.on.Store(false)

			done := make(chan error, 1)
			go func() { done <- o.Wait(-1, f.Pending) }()
			time.Sleep(10 * time.Millisecond)
			o.Signal() // spurious: nothing is ready
			time.Sleep(10 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("Wait returned %v without a ready condition", err)
			default:
			}
			f.on.Store(true)
			o.Signal()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("Signal did not wake the waiter")
			}
		})
	}
}

// TestObjectSignalWakesAll: one Signal for a condition that holds wakes
// every waiter, each re-checking its condition.
func TestObjectSignalWakesAll(t *testing.T) {
	o := newObject(t, fi.WaitUnspec)
	var f flag
	const n = 5
	done := make(chan error, n)
	for range n {
		go func() { done <- o.Wait(10*time.Second, f.Pending) }()
	}
	time.Sleep(20 * time.Millisecond)
	f.on.Store(true)
	o.Signal()
	for range n {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken")
		}
	}
}

func TestObjectInterruptAndClose(t *testing.T) {
	for _, k := range objectKinds {
		o, err := wait.NewObject(k)
		require.NoError(t, err)
		var f flag
		done := make(chan error, 2)
		for range 2 {
			go func() { done <- o.Wait(-1, f.Pending) }()
		}
		time.Sleep(10 * time.Millisecond)
		o.Interrupt()
		for range 2 {
			require.ErrorIs(t, <-done, fi.EINTR, "%v", k)
		}
		go func() { done <- o.Wait(-1, f.Pending) }()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, o.Close())
		require.ErrorIs(t, <-done, fi.EINTR, "%v", k)
		require.ErrorIs(t, o.Wait(-1, f.Pending), fi.EINVAL, "%v", k)
		require.ErrorIs(t, o.Close(), fi.EINVAL, "%v", k)
		require.ErrorIs(t, o.Control(wait.GetWaitObj, new(fi.WaitObj)), fi.EINVAL)
		o.Signal() // harmless after Close
		o.Reset()
	}
}

// TestObjectFD: the eventfd is readable from the first Signal until Reset,
// however many Signals came in between; Close releases it.
func TestObjectFD(t *testing.T) {
	o, err := wait.NewObject(fi.WaitFD)
	require.NoError(t, err)
	fd := -1
	require.NoError(t, o.Control(wait.GetWait, &fd))
	require.Equal(t, 0, pollIn(t, fd))
	o.Signal()
	o.Signal()
	require.Equal(t, 1, pollIn(t, fd))
	o.Reset()
	require.Equal(t, 0, pollIn(t, fd))
	o.Reset()
	require.Equal(t, 0, pollIn(t, fd))
	o.Signal()
	require.Equal(t, 1, pollIn(t, fd))
	var mc wait.MutexCond
	require.ErrorIs(t, o.Control(wait.GetWait, &mc), fi.EINVAL)
	require.ErrorIs(t, o.Control(wait.Command(0), nil), fi.ENOSYS)
	require.NoError(t, o.Close())
	_, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.ErrorIs(t, err, unix.EBADF, "eventfd closed")
}

func TestObjectMutexCond(t *testing.T) {
	o := newObject(t, fi.WaitMutexCond)
	var mc wait.MutexCond
	require.NoError(t, o.Control(wait.GetWait, &mc))
	require.ErrorIs(t, o.Control(wait.GetWait, new(int)), fi.EINVAL)
	var f flag
	done := make(chan struct{})
	go func() {
		mc.Mutex.Lock()
		for !f.Pending() {
			mc.Cond.Wait()
		}
		mc.Mutex.Unlock()
		close(done)
	}()
	time.Sleep(10 * time.Millisecond)
	f.on.Store(true)
	o.Signal()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Cond was not broadcast")
	}
}

func TestControlNoObject(t *testing.T) {
	for _, k := range []fi.WaitObj{fi.WaitUnspec, fi.WaitYield} {
		var fd int
		require.ErrorIs(t, newObject(t, k).Control(wait.GetWait, &fd), fi.ENODATA, "%v", k)
	}
	require.Equal(t, "FI_GETWAIT", wait.GetWait.String())
	require.Equal(t, "FI_GETWAITOBJ", wait.GetWaitObj.String())
	require.Equal(t, "Command(3)", wait.Command(3).String())
}

func TestSetOpen(t *testing.T) {
	_, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD, Flags: fi.WRITE}, nil)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	_, err = wait.Open(wait.Attr{WaitObj: fi.WaitNone}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = wait.Open(wait.Attr{WaitObj: fi.WaitSet}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = wait.Open(wait.Attr{WaitObj: fi.WaitPollFD}, nil)
	require.ErrorIs(t, err, fi.ENOSYS)
	for _, k := range objectKinds {
		s, err := wait.Open(wait.Attr{WaitObj: k}, "ctx")
		require.NoError(t, err)
		require.Equal(t, fi.ClassWait, s.Class())
		require.Equal(t, "ctx", s.Context())
		require.Equal(t, k, s.Attr().WaitObj)
		require.NoError(t, s.Close())
		require.ErrorIs(t, s.Close(), fi.EINVAL)
	}
}

func TestSetMembers(t *testing.T) {
	s, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	a, b := new(flag), new(flag)
	require.ErrorIs(t, s.Add(nil), fi.EINVAL)
	require.NoError(t, s.Add(a))
	require.ErrorIs(t, s.Add(a), fi.EALREADY)
	require.NoError(t, s.Add(b))
	require.ErrorIs(t, s.Close(), fi.EBUSY)

	require.ErrorIs(t, s.Wait(0), fi.ETIMEDOUT)
	require.NoError(t, s.TryWait())
	b.on.Store(true)
	require.NoError(t, s.Wait(0))
	require.ErrorIs(t, s.TryWait(), fi.EAGAIN)
	require.ErrorIs(t, wait.TryWait(s), fi.EAGAIN)

	require.NoError(t, s.Remove(b))
	require.ErrorIs(t, s.Remove(b), fi.ENOENT)
	require.ErrorIs(t, s.Wait(0), fi.ETIMEDOUT, "b left")
	require.NoError(t, s.TryWait())
	require.NoError(t, s.Remove(a))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Add(a), fi.EINVAL, "closed")
	require.ErrorIs(t, s.TryWait(), fi.EINVAL)
	require.ErrorIs(t, s.Wait(0), fi.EINVAL)
}

// TestSetWaitWakes: fi_wait blocks until a member signals; a set with an FD
// object exposes one fd for all members.
func TestSetWaitWakes(t *testing.T) {
	s, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	members := []*flag{new(flag), new(flag), new(flag)}
	for _, m := range members {
		require.NoError(t, s.Add(m))
	}
	var fd int
	require.NoError(t, s.Control(wait.GetWait, &fd))
	for i, m := range members {
		require.NoError(t, s.TryWait())
		require.Equal(t, 0, pollIn(t, fd))
		done := make(chan error, 1)
		go func() { done <- s.Wait(-1) }()
		time.Sleep(10 * time.Millisecond)
		m.on.Store(true)
		s.Signal()
		select {
		case err := <-done:
			require.NoError(t, err, "member %d", i)
		case <-time.After(5 * time.Second):
			t.Fatalf("member %d did not wake the set", i)
		}
		require.Equal(t, 1, pollIn(t, fd))
		m.on.Store(false)
	}
	for _, m := range members {
		require.NoError(t, s.Remove(m))
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait(-1) }()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-done, fi.EINVAL, "Close ends Wait")
}

type tryer struct{ err error }

func (t tryer) TryWait() error { return t.err }

func TestTryWaitList(t *testing.T) {
	require.NoError(t, wait.TryWait())
	require.NoError(t, wait.TryWait(tryer{}, tryer{}))
	require.ErrorIs(t, wait.TryWait(tryer{}, tryer{fi.EAGAIN}, tryer{fi.EINVAL}), fi.EAGAIN)
	require.ErrorIs(t, wait.TryWait(tryer{}, nil), fi.EINVAL)
}

// TestConcurrentSignalWait: signallers and waiters at once under -race;
// every waiter sees its condition.
func TestConcurrentSignalWait(t *testing.T) {
	o := newObject(t, fi.WaitFD)
	var tokens atomic.Int64
	take := func() bool {
		for {
			n := tokens.Load()
			if n == 0 {
				return false
			}
			if tokens.CompareAndSwap(n, n-1) {
				return true
			}
		}
	}
	const n = 2000
	var wg sync.WaitGroup
	var got atomic.Int64
	for range 4 {
		wg.Go(func() {
			for got.Load() < n {
				if err := o.Wait(20*time.Millisecond, func() bool { return tokens.Load() > 0 }); err == nil && take() {
					got.Add(1)
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range n / 2 {
				tokens.Add(1)
				o.Signal()
				if tokens.Load() > 64 {
					time.Sleep(50 * time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(n), got.Load())
}

// signaller is a SignalTaker member: never pending, with a signal count.
type signaller struct{ signals atomic.Int32 }

func (s *signaller) Pending() bool { return false }
func (s *signaller) TakeSignal() bool {
	for {
		n := s.signals.Load()
		if n == 0 {
			return false
		}
		if s.signals.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// TestSetWaitTakesSignal: a member's signal ends one Set.Wait, made before
// it (remembered) or while it blocks; TryWait and a zero timeout leave it.
func TestSetWaitTakesSignal(t *testing.T) {
	for _, kind := range objectKinds {
		t.Run(kind.String(), func(t *testing.T) {
			s, err := wait.Open(wait.Attr{WaitObj: kind}, nil)
			require.NoError(t, err)
			m := new(signaller)
			require.NoError(t, s.Add(m))
			defer func() { require.NoError(t, s.Remove(m)); require.NoError(t, s.Close()) }()

			m.signals.Store(1)
			s.Signal()
			require.NoError(t, s.TryWait(), "a signal is not an entry")
			require.ErrorIs(t, s.Wait(0), fi.ETIMEDOUT, "a poll leaves the signal")
			require.NoError(t, s.Wait(-1), "the remembered signal ends the wait")
			require.ErrorIs(t, s.Wait(20), fi.ETIMEDOUT, "taken by the first wait")

			done := make(chan error, 1)
			go func() { done <- s.Wait(-1) }()
			time.Sleep(10 * time.Millisecond)
			m.signals.Store(1)
			s.Signal()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("a signal did not end a blocked Wait")
			}
			require.Zero(t, m.signals.Load())
		})
	}
}
