package fabric_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// sleepLimit bounds how long a test waits for a reader to fall asleep or
// come back; the readers' own timeouts are far longer, so a reader that
// never sleeps or never wakes fails the test instead of passing late.
const sleepLimit = 10 * time.Second

// TestManualSReadSleepsUntilResponse: with FI_PROGRESS_MANUAL, an SRead
// with nothing arriving stops spinning and sleeps in poll(2) on the
// endpoint's socket; the response to its request, sent once the target's
// application reads, wakes it, and the completion is right.
func TestManualSReadSleepsUntilResponse(t *testing.T) {
	a := newNode(t, nodeOpts{progress: fabric.ProgressManual})
	b := newNode(t, nodeOpts{progress: fabric.ProgressManual})
	connect(t, a, b)
	binary.LittleEndian.PutUint64(b.mem, 41)

	one := binary.LittleEndian.AppendUint64(nil, 1)
	old := make([]byte, 8)
	require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peer, 0, b.region.Key(),
		fatomic.UINT64, fatomic.SUM, "fetch"))
	buf := make([]fabric.CQEntry, 1)
	reader := testenv.StartSleeper(func() error {
		n, err := a.txCQ.SRead(buf, 60_000)
		if err == nil && n != 1 {
			t.Errorf("SRead: %d entries", n)
		}
		return err
	})
	// The target does not read, so nothing answers: the reader sleeps.
	reader.WaitInPoll(t, sleepLimit)

	target := testenv.StartSleeper(func() error { return b.rcntr.Wait(1, 60_000) })
	require.NoError(t, reader.Wait(t, sleepLimit))
	require.Equal(t, "fetch", buf[0].Context)
	require.Equal(t, uint64(41), binary.LittleEndian.Uint64(old))
	require.NoError(t, target.Wait(t, sleepLimit))
	require.Equal(t, uint64(42), binary.LittleEndian.Uint64(b.mem))

	// The target's reader now sleeps until the next request wakes it.
	target = testenv.StartSleeper(func() error { return b.rcntr.Wait(2, 60_000) })
	target.WaitInPoll(t, sleepLimit)
	require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peer, 0, b.region.Key(),
		fatomic.UINT64, fatomic.SUM, "fetch2"))
	require.Equal(t, "fetch2", waitComp(t, a.txCQ).Context)
	require.Equal(t, uint64(42), binary.LittleEndian.Uint64(old))
	require.NoError(t, target.Wait(t, sleepLimit))
}

// TestManualSReadSignal: fi_cq_signal wakes a manual-progress SRead that
// sleeps in poll(2), which returns FI_EAGAIN long before its timeout.
func TestManualSReadSignal(t *testing.T) {
	a := newNode(t, nodeOpts{progress: fabric.ProgressManual})
	buf := make([]fabric.CQEntry, 1)
	reader := testenv.StartSleeper(func() error {
		_, err := a.txCQ.SRead(buf, 60_000)
		return err
	})
	reader.WaitInPoll(t, sleepLimit)
	require.NoError(t, a.txCQ.Signal())
	require.ErrorIs(t, reader.Wait(t, sleepLimit), fi.EAGAIN)
}

// TestManualCntrWaitWokenByAdd: fi_cntr_add from another goroutine wakes a
// manual-progress fi_cntr_wait sleeping in poll(2).
func TestManualCntrWaitWokenByAdd(t *testing.T) {
	a := newNode(t, nodeOpts{progress: fabric.ProgressManual})
	waiter := testenv.StartSleeper(func() error { return a.rcntr.Wait(5, 60_000) })
	waiter.WaitInPoll(t, sleepLimit)
	require.NoError(t, a.rcntr.Add(5))
	require.NoError(t, waiter.Wait(t, sleepLimit))
}

// TestManualCloseUnderSleeper: closing an endpoint while a reader of its
// CQ sleeps in poll(2) on the endpoint's socket wakes the reader before
// the socket closes, and neither hangs; the reader then times out.
func TestManualCloseUnderSleeper(t *testing.T) {
	closeUnderSleeper(t, fabric.ProgressManual)
}

// TestAutoSReadAssists: with auto progress, an SRead with nothing queued
// sleeps in poll(2) on the endpoint's socket and receives the response
// itself (the receive goroutine stands back meanwhile); once the reader
// has returned, the receive goroutine serves requests again.
func TestAutoSReadAssists(t *testing.T) {
	a := newNode(t, nodeOpts{})
	b := newNode(t, nodeOpts{})
	connect(t, a, b)
	one := binary.LittleEndian.AppendUint64(nil, 1)

	buf := make([]fabric.CQEntry, 1)
	reader := testenv.StartSleeper(func() error {
		n, err := a.txCQ.SRead(buf, 60_000)
		if err == nil && n != 1 {
			t.Errorf("SRead: %d entries", n)
		}
		return err
	})
	reader.WaitInPoll(t, sleepLimit)
	old := make([]byte, 8)
	require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peer, 0, b.region.Key(),
		fatomic.UINT64, fatomic.SUM, "assisted"))
	require.NoError(t, reader.Wait(t, sleepLimit))
	require.Equal(t, "assisted", buf[0].Context)
	require.Equal(t, uint64(0), binary.LittleEndian.Uint64(old))

	// Nobody reads a's CQs now: a's receive goroutine serves b's request.
	require.NoError(t, b.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, b.peer, 0, a.region.Key(),
		fatomic.UINT64, fatomic.SUM, "served"))
	require.Equal(t, "served", waitComp(t, b.txCQ).Context)
	require.Equal(t, uint64(0), binary.LittleEndian.Uint64(old))
	// Target memory is written with atomics by a's engine.
	require.Equal(t, uint64(1), atomic.LoadUint64((*uint64)(unsafe.Pointer(&a.mem[0]))))
}

// TestAutoCloseUnderAssistingReader: closing an auto-progress endpoint
// while a reader of its CQ sleeps in poll(2) on its socket neither hangs
// nor leaves the reader polling a closed descriptor.
func TestAutoCloseUnderAssistingReader(t *testing.T) {
	closeUnderSleeper(t, fabric.ProgressAuto)
}

// closeUnderSleeper closes an endpoint of a domain with progress p while a
// reader of its CQ sleeps in poll(2) on its socket: Close must return and
// the reader must then time out.
func closeUnderSleeper(t *testing.T, p fabric.Progress) {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Progress: p}, nil)
	require.NoError(t, err)
	defer d.Close()
	cq, err := d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	defer cq.Close()
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	v, err := d.AVOpen(av.Attr{}, nil)
	require.NoError(t, err)
	defer v.Close()
	require.NoError(t, ep.Bind(v, 0))
	require.NoError(t, ep.Bind(cq, fi.TRANSMIT|fi.RECV))
	require.NoError(t, ep.Enable())

	buf := make([]fabric.CQEntry, 1)
	reader := testenv.StartSleeper(func() error {
		_, err := cq.SRead(buf, 2000)
		return err
	})
	reader.WaitInPoll(t, sleepLimit)
	closed := make(chan error, 1)
	go func() { closed <- ep.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(sleepLimit):
		t.Fatalf("Endpoint.Close (progress %v) hung under a sleeping reader", p)
	}
	require.ErrorIs(t, reader.Wait(t, sleepLimit), fi.EAGAIN)
}
