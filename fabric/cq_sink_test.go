package fabric_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// sliceSink is a CQSink over a slice, with a capacity.
type sliceSink struct {
	mu     sync.Mutex
	e      []fabric.CQEntry
	src    []fi.Addr
	cap    int
	held   int
	pushed int
}

func (s *sliceSink) Push(e *fabric.CQEntry, src fi.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.e) == s.cap {
		return false
	}
	s.e, s.src = append(s.e, *e), append(s.src, src)
	s.pushed++
	return true
}

func (s *sliceSink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.e)
}

func (s *sliceSink) Read(buf []fabric.CQEntry, src []fi.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := copy(buf, s.e)
	if src != nil {
		copy(src, s.src[:n])
	}
	s.e, s.src = s.e[n:], s.src[n:]
	return n
}

// counts returns how many the CQ holds and how many were pushed.
func (s *sliceSink) counts() (held, pushed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held, s.pushed
}

func (s *sliceSink) Held(n int, closed bool) {
	s.mu.Lock()
	s.held = n
	s.mu.Unlock()
}

// TestCQSinkOrder: success completions go to the sink while the CQ holds
// nothing; an error and what follows it stay in the CQ; reads return them
// in completion order, the error as FI_EAVAIL once the sink's older
// entries are read, and fi_cq_readerr finds no error while those are
// there.
func TestCQSinkOrder(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	sink := &sliceSink{cap: 16}
	require.NoError(t, b.rxCQ.SetSink(sink))
	require.ErrorIs(t, b.rxCQ.SetSink(&sliceSink{}), fi.EBUSY)

	buf := make([]byte, 8)
	require.NoError(t, b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, "r1"))
	require.NoError(t, a.ep.Send([]byte("one"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	waitFor(t, func() bool { return sink.Len() == 1 })

	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "r2"))
	require.NoError(t, b.ep.Cancel("r2")) // an error completion: stays in the CQ
	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "r3"))
	require.NoError(t, a.ep.Send([]byte("three"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	waitFor(t, func() bool { h, _ := sink.counts(); return h == 2 })
	require.Equal(t, 1, sink.Len(), "r3 follows an error: not in the sink")

	_, err := b.rxCQ.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN, "r1, a success, is the oldest")
	out := make([]fabric.CQEntry, 4)
	n, err := b.rxCQ.Read(out)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "r1", out[0].Context)
	_, err = b.rxCQ.Read(out)
	require.ErrorIs(t, err, fi.EAVAIL)
	e, err := b.rxCQ.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, "r2", e.Context)
	require.Equal(t, fi.ECANCELED, e.Err)
	n, err = b.rxCQ.Read(out)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "r3", out[0].Context)
	held, _ := sink.counts()
	require.Equal(t, 0, held)

	// The CQ is empty again: the next success goes to the sink.
	require.NoError(t, b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, "r4"))
	require.NoError(t, a.ep.Send([]byte("four"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	waitFor(t, func() bool { _, p := sink.counts(); return p == 2 })
	require.Equal(t, "r4", comp(t, b.rxCQ).Context)
}

// TestCQSinkFull: a completion the sink has no room for stays in the CQ,
// and so do the ones after it until the CQ is empty; the order holds.
func TestCQSinkFull(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	sink := &sliceSink{cap: 2}
	require.NoError(t, b.rxCQ.SetSink(sink))
	for i := range 5 {
		require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, i))
	}
	for range 5 {
		require.NoError(t, a.ep.Send([]byte("x"), mr.Desc{}, a.peer, nil))
		comp(t, a.txCQ)
	}
	waitFor(t, func() bool { h, _ := sink.counts(); return h == 3 })
	out := make([]fabric.CQEntry, 8)
	n, err := b.rxCQ.Read(out)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	for i := range 5 {
		require.Equal(t, i, out[i].Context)
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
