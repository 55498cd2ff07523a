package fabric_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Auto progress with readers that poll (Engine.Poll): while an
// application thread spins on fi_cq_read or fi_cntr_read, it receives for
// its endpoint and the receive goroutine stands down; once it stops, the
// receive goroutine serves the endpoint again.

// spinLimit bounds a spinning read in these tests.
const spinLimit = 10 * time.Second

// spinComp reads one completion from cq with Read in a loop, as an
// application spinning on fi_cq_read does.
func spinComp(t testing.TB, cq *fabric.CQ) (fabric.CQEntry, error) {
	buf := make([]fabric.CQEntry, 1)
	deadline := time.Now().Add(spinLimit)
	for time.Now().Before(deadline) {
		n, err := cq.Read(buf)
		switch {
		case err == nil && n == 1:
			return buf[0], nil
		case errors.Is(err, fi.EAVAIL):
			e, rerr := cq.ReadErr(0)
			if rerr != nil {
				return fabric.CQEntry{}, rerr
			}
			return fabric.CQEntry{}, e.Err
		case err != nil && !errors.Is(err, fi.EAGAIN):
			return fabric.CQEntry{}, err
		}
	}
	return fabric.CQEntry{}, fi.ETIMEDOUT
}

// TestAutoSpinningReadersReceive: with auto progress, an initiator that
// spins on its CQ and a target that spins on its counter receive their
// packets themselves: their receive goroutines process next to none of
// the batches (Stats.ReceiverBatches). Without the hand-over every batch
// would be the receive goroutine's.
func TestAutoSpinningReadersReceive(t *testing.T) {
	a := newNode(t, nodeOpts{})
	b := newNode(t, nodeOpts{})
	connect(t, a, b)
	const n = 400
	// One write first, waited for: the receive goroutines may hold the
	// transports in a blocking receive until their first packet.
	src := make([]byte, 8)
	require.NoError(t, a.ep.Write(src, mr.Desc{}, a.peer, 0, b.region.Key(), "warm"))
	_, err := spinComp(t, a.txCQ)
	require.NoError(t, err)
	a0, b0 := a.ep.Stats().ReceiverBatches, b.ep.Stats().ReceiverBatches

	target := make(chan error, 1)
	go func() { // b's application thread spins on fi_cntr_read
		deadline := time.Now().Add(spinLimit)
		for b.rcntr.Read() < n+1 {
			if time.Now().After(deadline) {
				target <- fi.ETIMEDOUT
				return
			}
		}
		target <- nil
	}()
	for i := range n {
		binary.LittleEndian.PutUint64(src, uint64(i))
		require.NoError(t, a.ep.Write(src, mr.Desc{}, a.peer, uint64(8*(i%64)), b.region.Key(), i))
		e, err := spinComp(t, a.txCQ)
		require.NoError(t, err)
		require.Equal(t, i, e.Context)
	}
	require.NoError(t, <-target)
	da, db := a.ep.Stats().ReceiverBatches-a0, b.ep.Stats().ReceiverBatches-b0
	t.Logf("receive goroutine batches over %d writes: initiator %d, target %d", n, da, db)
	// A reader descheduled for longer than assistHold hands the
	// transport back for a batch or two: a quarter (three quarters under
	// the race detector, whose spinning goroutines lose their Ps for
	// whole preemption slices and poll more than pollSpinGap apart: up to
	// 170 of 400 seen at load average 12) leaves room for that and still
	// fails if the goroutine competes (400 of 400 when fi_cntr_read did
	// not poll).
	limit := uint64(n / 4)
	if raceEnabled {
		limit = 3 * n / 4
	}
	require.Less(t, da, limit, "initiator's receive goroutine kept receiving while a reader spun on its CQ")
	require.Less(t, db, limit, "target's receive goroutine kept receiving while a reader spun on its counter")
}

// TestAutoServesAfterPollerStops: a target whose application spun on its
// CQ and then stopped calling into the provider (an MPI passive target
// computing) still executes its peers' atomics: its receive goroutine
// resumes assistHold after the last poll.
func TestAutoServesAfterPollerStops(t *testing.T) {
	a := newNode(t, nodeOpts{})
	b := newNode(t, nodeOpts{})
	connect(t, a, b)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	old := make([]byte, 8)
	for round := range 3 {
		// b's application polls its CQ for a while (the receive goroutine
		// stands down), then stops polling.
		buf := make([]fabric.CQEntry, 1)
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
			_, err := b.rxCQ.Read(buf)
			require.ErrorIs(t, err, fi.EAGAIN)
		}
		before := b.ep.Stats().ReceiverBatches
		for i := range 4 {
			require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peer, 0, b.region.Key(),
				fatomic.UINT64, fatomic.SUM, i))
			// a spins too: only b's receive goroutine can serve b.
			e, err := spinComp(t, a.txCQ)
			require.NoError(t, err, "round %d op %d: the passive target was not served", round, i)
			require.Equal(t, i, e.Context)
			require.Equal(t, uint64(4*round+i), binary.LittleEndian.Uint64(old))
		}
		require.Greater(t, b.ep.Stats().ReceiverBatches, before, "who served the target if not its receive goroutine?")
	}
}

// TestAutoPollersAndPosterConcurrent: two threads spin on one CQ while a
// third posts (FI_THREAD_SAFE): every completion is read exactly once and
// nothing hangs, whichever thread receives.
func TestAutoPollersAndPosterConcurrent(t *testing.T) {
	a := newNode(t, nodeOpts{})
	b := newNode(t, nodeOpts{})
	connect(t, a, b)
	const n = 300
	var mu sync.Mutex
	got := make(map[int]int)
	var done sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		done.Add(1)
		go func() {
			defer done.Done()
			buf := make([]fabric.CQEntry, 4)
			for {
				select {
				case <-stop:
					return
				default:
				}
				k, err := a.txCQ.Read(buf)
				if err != nil {
					if !errors.Is(err, fi.EAGAIN) {
						t.Errorf("Read: %v", err)
						return
					}
					continue
				}
				mu.Lock()
				for _, e := range buf[:k] {
					got[e.Context.(int)]++
				}
				mu.Unlock()
			}
		}()
	}
	src := make([]byte, 8)
	for i := range n {
		for {
			err := a.ep.Write(src, mr.Desc{}, a.peer, 0, b.region.Key(), i)
			if !errors.Is(err, fi.EAGAIN) {
				require.NoError(t, err)
				break
			}
		}
	}
	deadline := time.Now().Add(spinLimit)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	done.Wait()
	require.Len(t, got, n)
	for i, c := range got {
		require.Equal(t, 1, c, "completion %d read %d times", i, c)
	}
}
