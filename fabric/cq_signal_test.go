package fabric_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/wait"
)

// signalPrompt is how soon a read must end after a signal: fabtests'
// fi_cq_test fails its cq_signal case ("signal ignored") past 1000 ms of a
// 2000 ms sread.
const signalPrompt = time.Second

// signalGuard bounds every read in these tests, so that one with timeout
// -1 that ignores the signal fails the test instead of hanging it.
const signalGuard = 10 * time.Second

// stillBlocked is how long a read that has no signal to take must stay
// blocked to count as blocked.
const stillBlocked = 50 * time.Millisecond

type readResult struct {
	n       int
	err     error
	elapsed time.Duration
}

// startRead runs read in a goroutine and returns its result channel.
func startRead(read func() (int, error)) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		start := time.Now()
		n, err := read()
		ch <- readResult{n, err, time.Since(start)}
	}()
	return ch
}

// awaitRead returns what the read on ch returned, failing the test when it
// has not returned within signalGuard.
func awaitRead(t *testing.T, ch <-chan readResult, what string) readResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(signalGuard):
		t.Fatalf("%s: still blocked after %v", what, signalGuard)
	}
	return readResult{}
}

// requireBlocked fails when the read on ch returns within stillBlocked.
func requireBlocked(t *testing.T, ch <-chan readResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: returned (%d, %v) after %v with no signal to take", what, r.n, r.err, r.elapsed)
	case <-time.After(stillBlocked):
	}
}

// requireSignalled checks a read ended by a signal: FI_EAGAIN, nothing read,
// promptly.
func requireSignalled(t *testing.T, r readResult, what string) {
	t.Helper()
	require.ErrorIs(t, r.err, fi.EAGAIN, what)
	require.Zero(t, r.n, what)
	require.Less(t, r.elapsed, signalPrompt, "%s: the signal was not taken at once", what)
}

// TestCQSignalRemembered is fi_cq_signal(3) as libfabric's CQs implement it
// (fabtests fi_cq_test, cq_signal): a signal made while nobody reads is
// remembered, and the next blocking read that finds nothing returns
// FI_EAGAIN at once; each signal ends exactly one blocking read; a read
// that finds completions returns them and leaves the signal pending; a
// zero timeout does not take it. For every wait object, both progress
// modes, timeouts 2000 and -1, and SRead and SReadFrom.
func TestCQSignalRemembered(t *testing.T) {
	waits := []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield, fi.WaitSet}
	for _, w := range waits {
		for _, prog := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
			for _, timeoutMs := range []int{2000, -1} {
				for _, from := range []bool{false, true} {
					call := "SRead"
					if from {
						call = "SReadFrom"
					}
					name := fmt.Sprintf("%v/progress%d/timeout%d/%s", w, prog, timeoutMs, call)
					t.Run(name, func(t *testing.T) { testCQSignal(t, w, prog, timeoutMs, from) })
				}
			}
		}
	}
}

func testCQSignal(t *testing.T, w fi.WaitObj, prog fabric.Progress, timeoutMs int, from bool) {
	attr := fabric.CQAttr{WaitObj: w}
	var set *wait.Set
	if w == fi.WaitSet {
		var err error
		set, err = wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, set.Close()) }) // after the side's cleanup
		attr.WaitSet = set
	}
	s := newSide(t, sideOpts{dom: fabric.DomainAttr{Progress: prog}, txCQ: &attr})
	self := s.insert(t, s.ep.GetName())
	cq := s.txCQ
	buf := make([]fabric.CQEntry, 4)
	src := make([]fi.Addr, 4)
	read := func(ms int) func() (int, error) {
		return func() (int, error) {
			if from {
				return cq.SReadFrom(buf[:1], src[:1], ms)
			}
			return cq.SRead(buf[:1], ms)
		}
	}
	// Two concurrent readers need their own buffers.
	read2 := func() (int, error) {
		b, a := make([]fabric.CQEntry, 1), make([]fi.Addr, 1)
		if from {
			return cq.SReadFrom(b, a, timeoutMs)
		}
		return cq.SRead(b, timeoutMs)
	}

	// Signal before the read: the read returns at once.
	require.NoError(t, cq.Signal())
	requireSignalled(t, awaitRead(t, startRead(read(timeoutMs)), "read after a signal"), "read after a signal")

	// The signal was consumed: the next read blocks until signalled again.
	r := startRead(read(timeoutMs))
	requireBlocked(t, r, "second read")
	require.NoError(t, cq.Signal())
	res := awaitRead(t, r, "blocked read, signalled")
	require.ErrorIs(t, res.err, fi.EAGAIN)

	// Two blocked readers, one signal: exactly one returns.
	r1, r2 := startRead(read2), startRead(read2)
	time.Sleep(stillBlocked)
	require.NoError(t, cq.Signal())
	var first readResult
	var other <-chan readResult
	select {
	case first = <-r1:
		other = r2
	case first = <-r2:
		other = r1
	case <-time.After(signalGuard):
		t.Fatal("two blocked readers: a signal ended neither")
	}
	require.ErrorIs(t, first.err, fi.EAGAIN)
	requireBlocked(t, other, "two blocked readers: the second after one signal")
	require.NoError(t, cq.Signal())
	res = awaitRead(t, other, "two blocked readers: the second after two signals")
	require.ErrorIs(t, res.err, fi.EAGAIN)

	// A zero timeout is a plain read: it leaves the signal pending.
	require.NoError(t, cq.Signal())
	n, err := read(0)()
	require.ErrorIs(t, err, fi.EAGAIN)
	require.Zero(t, n)
	requireSignalled(t, awaitRead(t, startRead(read(timeoutMs)), "read after a zero-timeout read"), "read after a zero-timeout read")

	// A read that finds a completion returns it; the signal stays for the
	// next read that finds nothing.
	require.NoError(t, s.ep.Write([]byte("signal"), mr.Desc{}, self, 0, regionKey, "w"))
	deadline := time.Now().Add(signalGuard)
	for cq.TryWait() == nil { // until the completion is queued
		require.True(t, time.Now().Before(deadline), "the write never completed")
		_, _ = s.rxCQ.Read(buf) // drives the endpoint under manual progress
		time.Sleep(100 * time.Microsecond)
	}
	require.NoError(t, cq.Signal())
	res = awaitRead(t, startRead(read(timeoutMs)), "read with a completion queued")
	require.NoError(t, res.err)
	require.Equal(t, 1, res.n)
	require.Equal(t, "w", buf[0].Context)
	requireSignalled(t, awaitRead(t, startRead(read(timeoutMs)), "read after the completion"), "read after the completion")

	if set != nil {
		// fi_wait on the CQ's wait set takes a pending signal like sread
		// does (libfabric signals the set's wait object), once.
		require.NoError(t, cq.Signal())
		start := time.Now()
		require.NoError(t, set.Wait(timeoutMs))
		require.Less(t, time.Since(start), signalPrompt)
		require.ErrorIs(t, set.Wait(int(stillBlocked/time.Millisecond)), fi.ETIMEDOUT, "the signal was taken")
	}
}

// TestCQSignalLeavesCounterWait: fi_cntr has no signal call, and
// fi_cq_signal on a CQ of the same endpoint does not end fi_cntr_wait, in
// either progress mode, also when the counter and the CQ share a wait set
// (the set's Wait takes the CQ's signal; the counter's own wait does not).
func TestCQSignalLeavesCounterWait(t *testing.T) {
	for _, prog := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("progress%d/sharedset=%v", prog, shared), func(t *testing.T) {
				var set *wait.Set
				cqAttr := fabric.CQAttr{WaitObj: fi.WaitUnspec}
				cntrAttr := fabric.CntrAttr{WaitObj: fi.WaitUnspec}
				if shared {
					var err error
					set, err = wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
					require.NoError(t, err)
					t.Cleanup(func() { require.NoError(t, set.Close()) })
					cqAttr = fabric.CQAttr{WaitObj: fi.WaitSet, WaitSet: set}
					cntrAttr = fabric.CntrAttr{WaitObj: fi.WaitSet, WaitSet: set}
				}
				s := newSide(t, sideOpts{dom: fabric.DomainAttr{Progress: prog}, txCQ: &cqAttr, noEnable: true})
				c, err := s.dom.CntrOpen(cntrAttr, nil)
				require.NoError(t, err)
				t.Cleanup(func() { // before the side's: the endpoint holds the counter
					require.NoError(t, s.ep.Close())
					require.NoError(t, c.Close())
				})
				require.NoError(t, s.ep.Bind(c, fi.WRITE))
				require.NoError(t, s.ep.Enable())

				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- c.Wait(1, 300) }()
				time.Sleep(20 * time.Millisecond)
				require.NoError(t, s.txCQ.Signal())
				select {
				case err := <-done:
					require.ErrorIs(t, err, fi.ETIMEDOUT)
					require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
				case <-time.After(signalGuard):
					t.Fatal("counter wait never returned")
				}
				require.Zero(t, c.Read())
				if shared {
					// The set's Wait takes the CQ's signal, once.
					require.NoError(t, set.Wait(2000))
					require.ErrorIs(t, set.Wait(int(stillBlocked/time.Millisecond)), fi.ETIMEDOUT)
					return
				}
				// The signal is still the CQ's.
				start = time.Now()
				_, err = s.txCQ.SRead(make([]fabric.CQEntry, 1), 2000)
				require.ErrorIs(t, err, fi.EAGAIN)
				require.Less(t, time.Since(start), signalPrompt)
			})
		}
	}
}

// TestCQSignalEndsThresholdWait: a remembered signal ends a threshold
// wait (fi_cq_sread's cond) with what is queued, short of the threshold,
// at once; the next threshold wait has no signal to take.
func TestCQSignalEndsThresholdWait(t *testing.T) {
	for _, prog := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
		t.Run(fmt.Sprintf("progress%d", prog), func(t *testing.T) {
			attr := fabric.CQAttr{WaitObj: fi.WaitUnspec, WaitCond: fabric.CQCondThreshold}
			s := newSide(t, sideOpts{dom: fabric.DomainAttr{Progress: prog}, txCQ: &attr})
			self := s.insert(t, s.ep.GetName())
			require.NoError(t, s.ep.Write([]byte("cond"), mr.Desc{}, self, 0, regionKey, "w"))
			deadline := time.Now().Add(signalGuard)
			for s.txCQ.TryWait() == nil { // until the completion is queued
				require.True(t, time.Now().Before(deadline), "the write never completed")
				_, _ = s.rxCQ.Read(make([]fabric.CQEntry, 1)) // drives the endpoint under manual progress
				time.Sleep(100 * time.Microsecond)
			}
			require.NoError(t, s.txCQ.Signal())
			buf := make([]fabric.CQEntry, 4)
			r := awaitRead(t, startRead(func() (int, error) { return s.txCQ.SReadCond(buf, nil, 3, -1) }), "threshold wait after a signal")
			require.NoError(t, r.err)
			require.Equal(t, 1, r.n, "what was queued, short of the threshold")
			require.Less(t, r.elapsed, signalPrompt)
			r = awaitRead(t, startRead(func() (int, error) {
				return s.txCQ.SReadCond(buf, nil, 3, int(stillBlocked/time.Millisecond))
			}), "second threshold wait")
			require.ErrorIs(t, r.err, fi.EAGAIN)
			require.GreaterOrEqual(t, r.elapsed, stillBlocked, "no signal left to take")
		})
	}
}
