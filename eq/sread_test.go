package eq_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// blockingKinds are the wait objects SRead works with.
var blockingKinds = []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield}

// TestSReadTimeout: SRead on an empty EQ with a 2 s timeout returns
// FI_EAGAIN after 1.5 to 2.5 s (the coarse bound the task asks for); the
// spinning FI_WAIT_YIELD kind is checked with a shorter timeout.
func TestSReadTimeout(t *testing.T) {
	for _, w := range blockingKinds {
		t.Run(w.String(), func(t *testing.T) {
			t.Parallel()
			timeout, lo, hi := 2000, 1500*time.Millisecond, 2500*time.Millisecond
			if w == fi.WaitYield {
				timeout, lo, hi = 100, 75*time.Millisecond, 1000*time.Millisecond
			}
			q := open(t, eq.Attr{Size: 4, WaitObj: w})
			start := time.Now()
			_, err := q.SRead(timeout, 0)
			took := time.Since(start)
			require.ErrorIs(t, err, fi.EAGAIN)
			require.GreaterOrEqual(t, took, lo)
			require.LessOrEqual(t, took, hi)

			_, err = q.SRead(0, 0)
			require.ErrorIs(t, err, fi.EAGAIN, "zero timeout only checks")
		})
	}
}

// TestSReadPending: with an event queued SRead returns it at once (well
// before its 2 s timeout), with FI_PEEK leaving it queued.
func TestSReadPending(t *testing.T) {
	for _, w := range blockingKinds {
		q := open(t, eq.Attr{Size: 4, Flags: fi.WRITE, WaitObj: w})
		require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, FID: q, Context: q, Data: 7}, 0))
		start := time.Now()
		e, err := q.SRead(2000, fi.PEEK)
		require.NoError(t, err, "%v", w)
		require.Equal(t, eq.Notify, e.Event)
		require.Same(t, q, e.FID)
		require.Same(t, q, e.Context)
		require.Equal(t, uint64(7), e.Data)
		e, err = q.SRead(2000, 0)
		require.NoError(t, err, "%v", w)
		require.Equal(t, uint64(7), e.Data)
		// Far below the 2 s timeout, with room for a loaded machine.
		require.Less(t, time.Since(start), time.Second, "%v", w)
		_, err = q.Read(0)
		require.ErrorIs(t, err, fi.EAGAIN)
	}
}

// TestSReadPeekKeepsEvent: on an FD EQ, an SRead with FI_PEEK neither
// consumes the event nor clears the signal, so the next SRead returns the
// event at once (fabtests' eq_wait_sread_peek).
func TestSReadPeekKeepsEvent(t *testing.T) {
	q := open(t, eq.Attr{Size: 32, Flags: fi.WRITE, WaitObj: fi.WaitFD})
	sread := func(flags fi.Flags) eq.Entry {
		t.Helper()
		start := time.Now()
		e, err := q.SRead(2000, flags)
		require.NoError(t, err)
		require.Less(t, time.Since(start), time.Second)
		return e
	}
	require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, Data: 1}, 0))
	require.Equal(t, uint64(1), sread(0).Data)
	require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, Data: 2}, 0))
	require.Equal(t, uint64(2), sread(fi.PEEK).Data)
	require.Equal(t, uint64(2), sread(0).Data)
	_, err := q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN)
}

func TestSReadErrorsAndFlags(t *testing.T) {
	q := open(t, eq.Attr{Size: 4, WaitObj: fi.WaitUnspec})
	_, err := q.SRead(0, fi.SEND)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	require.NoError(t, q.PostErr(eq.ErrEntry{Err: fi.EIO}))
	_, err = q.SRead(-1, 0)
	require.ErrorIs(t, err, fi.EAVAIL, "an error entry ends the wait")
	_, err = q.ReadErr(0)
	require.NoError(t, err)

	// Overrun counts as readable too.
	o := open(t, eq.Attr{Size: 1, WaitObj: fi.WaitUnspec})
	require.NoError(t, o.Post(eq.Entry{}))
	require.ErrorIs(t, o.Post(eq.Entry{}), fi.EOVERRUN)
	_, err = o.SRead(-1, 0)
	require.NoError(t, err)
	_, err = o.SRead(-1, 0)
	require.ErrorIs(t, err, fi.EAVAIL)
}

// TestSReadInvalidWaitObj: fi_eq(3) makes SRead invalid on FI_WAIT_NONE and
// FI_WAIT_SET EQs; the error is FI_ENOSYS, at once.
func TestSReadInvalidWaitObj(t *testing.T) {
	q := open(t, eq.Attr{Size: 4})
	_, err := q.SRead(-1, 0)
	require.ErrorIs(t, err, fi.ENOSYS)

	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	s := open(t, eq.Attr{Size: 4, WaitObj: fi.WaitSet, WaitSet: set})
	_, err = s.SRead(-1, 0)
	require.ErrorIs(t, err, fi.ENOSYS)
	require.NoError(t, s.Post(eq.Entry{}))
	_, err = s.SRead(-1, 0)
	require.ErrorIs(t, err, fi.ENOSYS, "even with an event queued")
	require.NoError(t, s.Close())
	require.NoError(t, set.Close())
}

// TestSReadWakesOnWrite: an SRead blocked forever in one goroutine returns
// the event another goroutine writes.
func TestSReadWakesOnWrite(t *testing.T) {
	for _, w := range blockingKinds {
		t.Run(w.String(), func(t *testing.T) {
			q := open(t, eq.Attr{Size: 4, Flags: fi.WRITE, WaitObj: w})
			got := make(chan eq.Entry, 1)
			errc := make(chan error, 1)
			go func() {
				e, err := q.SRead(-1, 0)
				got <- e
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond) // let it block
			require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, Data: 42}, 0))
			select {
			case e := <-got:
				require.NoError(t, <-errc)
				require.Equal(t, uint64(42), e.Data)
			case <-time.After(5 * time.Second):
				t.Fatal("SRead did not wake up")
			}
		})
	}
}

// TestSReadReturnsOnClose: closing the EQ from another goroutine ends an
// SRead blocked forever, with the closed-EQ error.
func TestSReadReturnsOnClose(t *testing.T) {
	for _, w := range blockingKinds {
		t.Run(w.String(), func(t *testing.T) {
			q, err := eq.Open(eq.Attr{Size: 4, WaitObj: w}, nil)
			require.NoError(t, err)
			errc := make(chan error, 3)
			for range 3 {
				go func() {
					_, err := q.SRead(-1, 0)
					errc <- err
				}()
			}
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, q.Close())
			for range 3 {
				select {
				case err := <-errc:
					require.ErrorIs(t, err, fi.EINVAL)
				case <-time.After(5 * time.Second):
					t.Fatal("SRead did not return after Close")
				}
			}
		})
	}
}

// TestSReadInterrupt: Interrupt ("signaled by some external source") ends
// blocked SReads with FI_EAGAIN; the EQ stays usable.
func TestSReadInterrupt(t *testing.T) {
	for _, w := range blockingKinds {
		q := open(t, eq.Attr{Size: 4, WaitObj: w})
		errc := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := q.SRead(-1, 0)
				errc <- err
			}()
		}
		time.Sleep(20 * time.Millisecond)
		q.Interrupt()
		for range 2 {
			select {
			case err := <-errc:
				require.ErrorIs(t, err, fi.EAGAIN, "%v", w)
			case <-time.After(5 * time.Second):
				t.Fatalf("%v: SRead did not return after Interrupt", w)
			}
		}
		require.NoError(t, q.Post(eq.Entry{Data: 1}))
		e, err := q.SRead(1000, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(1), e.Data)
	}
	open(t, eq.Attr{}).Interrupt() // no wait object: nothing to do
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

// TestWaitFD: the FI_GETWAIT fd is usable with poll(2) and epoll(7): not
// readable while nothing happened, readable after a write; an SRead or Read
// with FI_PEEK leaves it readable; TryWait re-arms it only when the EQ is
// empty.
func TestWaitFD(t *testing.T) {
	q := open(t, eq.Attr{Size: 8, Flags: fi.WRITE, WaitObj: fi.WaitFD})
	fd := -1
	require.NoError(t, q.Control(wait.GetWait, &fd))
	require.Equal(t, 0, pollIn(t, fd))
	require.NoError(t, q.TryWait())
	require.Equal(t, 0, pollIn(t, fd))

	require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, Data: 1}, 0))
	require.Equal(t, 1, pollIn(t, fd))
	_, err := q.SRead(100, fi.PEEK)
	require.NoError(t, err)
	require.Equal(t, 1, pollIn(t, fd), "SRead with FI_PEEK does not clear the signal")
	_, err = q.Read(fi.PEEK)
	require.NoError(t, err)
	require.Equal(t, 1, pollIn(t, fd))

	require.ErrorIs(t, q.TryWait(), fi.EAGAIN, "pending event")
	_, err = q.Read(0)
	require.NoError(t, err)
	require.NoError(t, q.TryWait())
	require.Equal(t, 0, pollIn(t, fd), "re-armed")

	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(epfd)
	require.NoError(t, unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}))
	events := make([]unix.EpollEvent, 1)
	n, err := unix.EpollWait(epfd, events, 0)
	require.NoError(t, err)
	require.Equal(t, 0, n)
	require.NoError(t, q.Post(eq.Entry{Event: eq.MRComplete}))
	n, err = unix.EpollWait(epfd, events, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int32(fd), events[0].Fd)
}

// TestWaitFDBlockingPoll: the fi_trywait protocol: TryWait, then block in
// poll(2); a write from another goroutine wakes the poll.
func TestWaitFDBlockingPoll(t *testing.T) {
	q := open(t, eq.Attr{Size: 8, WaitObj: fi.WaitFD})
	var fd int
	require.NoError(t, q.Control(wait.GetWait, &fd))
	require.NoError(t, q.TryWait())
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = q.Post(eq.Entry{Event: eq.AVComplete, Data: 5})
	}()
	ok, err := wait.PollFD(fd, 5*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	e, err := q.Read(0)
	require.NoError(t, err)
	require.Equal(t, uint64(5), e.Data)
}

// TestWaitMutexCond: FI_GETWAIT's MutexCond used as fi_mutex_cond: hold
// the mutex, TryWait, sleep on the condition while nothing is pending.
func TestWaitMutexCond(t *testing.T) {
	q := open(t, eq.Attr{Size: 8, WaitObj: fi.WaitMutexCond})
	var mc wait.MutexCond
	require.NoError(t, q.Control(wait.GetWait, &mc))
	woke := make(chan error, 1)
	go func() {
		mc.Mutex.Lock()
		for q.TryWait() == nil {
			mc.Cond.Wait()
		}
		mc.Mutex.Unlock()
		_, err := q.Read(0)
		woke <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete}))
	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("condition waiter did not wake up")
	}
}

// TestConcurrentSingleReader: several writers, one reader; every event
// arrives once and each writer's events arrive in its order.
func TestConcurrentSingleReader(t *testing.T) {
	const writers, perWriter = 4, 2000
	q := open(t, eq.Attr{Size: writers * perWriter, Flags: fi.WRITE, WaitObj: fi.WaitUnspec})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if err := q.Write(eq.Entry{Event: eq.Notify, Data: uint64(w)<<32 | uint64(i)}, 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]uint64, writers)
	deadline := time.Now().Add(20 * time.Second)
	for n := 0; n < writers*perWriter; n++ {
		e, err := q.SRead(5000, 0)
		require.NoError(t, err, "after %d events", n)
		w, i := e.Data>>32, e.Data&0xffffffff
		require.Equal(t, next[w], i, "writer %d out of order", w)
		next[w]++
		require.True(t, time.Now().Before(deadline))
	}
	wg.Wait()
	_, err := q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN)
}

// TestConcurrentReadersWriters: writers, SRead readers, Read spinners and
// peekers at once (run under -race); every event is read exactly once.
func TestConcurrentReadersWriters(t *testing.T) {
	const writers, perWriter, readers = 4, 3000, 4
	const total = writers * perWriter
	q := open(t, eq.Attr{Size: 256, Flags: fi.WRITE, WaitObj: fi.WaitFD})
	var seen [total]atomic.Int32
	var read, written atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < perWriter; {
				// Keep below the size: overrun is fatal. Several
				// writers may pass the check at once; the margin
				// covers them.
				if written.Load()-read.Load() > 128 {
					time.Sleep(10 * time.Microsecond)
					continue
				}
				if err := q.Write(eq.Entry{Event: eq.Notify, Data: uint64(w*perWriter + i)}, 0); err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
				i++
			}
		})
	}
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var e eq.Entry
				var err error
				switch r % 3 {
				case 0:
					e, err = q.SRead(50, 0)
				case 1:
					if _, perr := q.Read(fi.PEEK); perr == nil {
						_ = q.TryWait()
					}
					e, err = q.Read(0)
				default:
					e, err = q.SRead(-1, 0)
				}
				if err == fi.EAGAIN {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if e.Event == eq.Shutdown {
					return
				}
				seen[e.Data].Add(1)
				read.Add(1)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for read.Load() < total && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	// Release the reader blocked forever in SRead: each reader takes at
	// most one of these.
	for range readers {
		require.NoError(t, q.Post(eq.Entry{Event: eq.Shutdown}))
	}
	rg.Wait()
	require.Equal(t, int64(total), read.Load())
	for i := range seen {
		require.Equal(t, int32(1), seen[i].Load(), "event %d", i)
	}
}

// TestCloseRacesPost: Close while providers post and readers block; no
// panic, no lost wake-up, every call ends.
func TestCloseRacesPost(t *testing.T) {
	for range 20 {
		q, err := eq.Open(eq.Attr{Size: 64, WaitObj: fi.WaitFD}, nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for q.Post(eq.Entry{}) == nil {
					_, _ = q.Read(0)
				}
			})
			wg.Go(func() {
				for {
					if _, err := q.SRead(-1, 0); err != nil && err != fi.EAGAIN {
						return
					}
				}
			})
		}
		time.Sleep(time.Millisecond)
		require.NoError(t, q.Close())
		wg.Wait()
	}
}

// TestWaitSetAcrossEQs: one Set waits for three EQs (fi_wait), and its fd
// follows the fi_trywait protocol.
func TestWaitSetAcrossEQs(t *testing.T) {
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD}, "set")
	require.NoError(t, err)
	var qs [3]*eq.EQ
	for i := range qs {
		qs[i], err = eq.Open(eq.Attr{Size: 8, Flags: fi.WRITE, WaitObj: fi.WaitSet, WaitSet: set}, i)
		require.NoError(t, err)
	}
	require.ErrorIs(t, set.Close(), fi.EBUSY, "EQs are attached")

	require.ErrorIs(t, set.Wait(0), fi.ETIMEDOUT)
	start := time.Now()
	require.ErrorIs(t, set.Wait(50), fi.ETIMEDOUT)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond)

	var fd, eqfd int
	require.NoError(t, set.Control(wait.GetWait, &fd))
	require.NoError(t, qs[1].Control(wait.GetWait, &eqfd))
	require.Equal(t, fd, eqfd, "FI_GETWAIT on a member is the set's object")
	var kind fi.WaitObj
	require.NoError(t, qs[1].Control(wait.GetWaitObj, &kind))
	require.Equal(t, fi.WaitSet, kind)
	require.NoError(t, set.TryWait())
	require.Equal(t, 0, pollIn(t, fd))

	// One goroutine waits for all three; each EQ in turn wakes it.
	for i := range qs {
		done := make(chan error, 1)
		go func() { done <- set.Wait(-1) }()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, qs[i].Write(eq.Entry{Event: eq.Notify, Data: uint64(i)}, 0))
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("set did not wake for EQ %d", i)
		}
		require.Equal(t, 1, pollIn(t, fd))
		require.ErrorIs(t, set.TryWait(), fi.EAGAIN)
		require.ErrorIs(t, qs[(i+1)%3].TryWait(), fi.EAGAIN, "a member's TryWait is the set's")
		require.NoError(t, set.Wait(1000), "pending: returns at once")
		e, err := qs[i].Read(0)
		require.NoError(t, err)
		require.Equal(t, uint64(i), e.Data)
		require.NoError(t, wait.TryWait(set))
		require.Equal(t, 0, pollIn(t, fd))
	}

	// Error entries and overrun count as pending.
	require.NoError(t, qs[2].PostErr(eq.ErrEntry{Err: fi.EIO}))
	require.NoError(t, set.Wait(1000))
	_, err = qs[2].ReadErr(0)
	require.NoError(t, err)
	require.ErrorIs(t, set.Wait(0), fi.ETIMEDOUT)

	for _, q := range qs {
		require.NoError(t, q.Close())
	}
	require.ErrorIs(t, set.Wait(10), fi.ETIMEDOUT, "no members left")
	require.NoError(t, set.Close())
	_, err = eq.Open(eq.Attr{WaitObj: fi.WaitSet, WaitSet: set}, nil)
	require.ErrorIs(t, err, fi.EINVAL, "closed set")
}

func TestWaitSetKinds(t *testing.T) {
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitMutexCond, fi.WaitYield} {
		set, err := wait.Open(wait.Attr{WaitObj: w}, nil)
		require.NoError(t, err)
		a := open(t, eq.Attr{Size: 4, WaitObj: fi.WaitSet, WaitSet: set})
		b := open(t, eq.Attr{Size: 4, WaitObj: fi.WaitSet, WaitSet: set})
		done := make(chan error, 1)
		go func() { done <- set.Wait(5000) }()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, b.Post(eq.Entry{}))
		require.NoError(t, <-done, "%v", w)
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		require.NoError(t, set.Close())
	}
}

// TestWaitSetFDProtocolConcurrent: writers post to three EQs of a set while
// one consumer follows the fi_trywait protocol on the set's fd (TryWait,
// poll, drain). A lost wake-up would show as a poll that times out while
// events are still to come.
func TestWaitSetFDProtocolConcurrent(t *testing.T) {
	const perEQ = 3000
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	var qs [3]*eq.EQ
	for i := range qs {
		qs[i], err = eq.Open(eq.Attr{Size: perEQ, WaitObj: fi.WaitSet, WaitSet: set}, nil)
		require.NoError(t, err)
	}
	var fd int
	require.NoError(t, set.Control(wait.GetWait, &fd))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // posters finish even when a require stops the test
	for _, q := range qs {
		wg.Go(func() {
			for i := range perEQ {
				if err := q.Post(eq.Entry{Data: uint64(i)}); err != nil {
					t.Error(err)
					return
				}
				if i%16 == 0 {
					time.Sleep(20 * time.Microsecond) // let the consumer block now and then
				}
			}
		})
	}
	got, timeouts, blocked := 0, 0, 0
	next := [3]uint64{}
	for got < 3*perEQ && timeouts == 0 {
		if set.TryWait() == nil {
			blocked++
			ok, err := wait.PollFD(fd, 2*time.Second)
			require.NoError(t, err)
			if !ok {
				timeouts++
			}
		}
		for i, q := range qs {
			for {
				e, err := q.Read(0)
				if err == fi.EAGAIN {
					break
				}
				require.NoError(t, err)
				require.Equal(t, next[i], e.Data)
				next[i]++
				got++
			}
		}
	}
	wg.Wait()
	require.Zero(t, timeouts, "lost wake-up after %d events", got)
	require.Equal(t, 3*perEQ, got)
	t.Logf("blocked in poll %d times", blocked)
	for _, q := range qs {
		require.NoError(t, q.Close())
	}
	require.NoError(t, set.Close())
}

// TestEQFDProtocolConcurrent: the same protocol on one FD EQ's own fd.
func TestEQFDProtocolConcurrent(t *testing.T) {
	const n = 6000
	q := open(t, eq.Attr{Size: n, WaitObj: fi.WaitFD})
	var fd int
	require.NoError(t, q.Control(wait.GetWait, &fd))
	var wg sync.WaitGroup
	// Cleanups run last-in first-out: the poster is done before open's
	// cleanup closes the EQ, also when a require below stops the test.
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		for i := range n {
			if err := q.Post(eq.Entry{Data: uint64(i)}); err != nil {
				t.Error(err)
				return
			}
			if i%16 == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	})
	got := 0
	for got < n {
		if q.TryWait() == nil {
			ok, err := wait.PollFD(fd, 2*time.Second)
			require.NoError(t, err)
			require.True(t, ok, "lost wake-up after %d events", got)
		}
		for {
			e, err := q.Read(0)
			if err == fi.EAGAIN {
				break
			}
			require.NoError(t, err)
			require.Equal(t, uint64(got), e.Data)
			got++
		}
	}
}
