package veth

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// TestManualProgress: FI_PROGRESS_MANUAL across the veth pair, per
// transport (AF_XDP with the program attached, and the kernel socket).
// Nothing moves until an application reads; a reader with nothing
// arriving sleeps in poll(2) on its endpoint's descriptors (the AF_XDP
// sockets and the kernel socket) instead of spinning, and the packet that
// answers it wakes it. Then a pipelined run with both sides reading
// executes every fetch-add exactly once.
func TestManualProgress(t *testing.T) {
	testenv.RequirePriv(t)
	const total = 2000
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{domain: func(a *fabric.DomainAttr) { a.Progress = fabric.ProgressManual }})
		a, b := net.nodes[sideA][0], net.target()
		key := b.region.Key()
		const off = 64 // the counter; offset 0 serves the first op

		// The target's application is not reading: the request waits
		// in its rings, and the initiator's SRead falls asleep.
		old := make([]byte, 8)
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peers[0], 0, key,
			fatomic.UINT64, fatomic.SUM, "first"))
		buf := make([]fabric.CQEntry, 1)
		reader := testenv.StartSleeper(func() error {
			_, err := a.txCQ.SRead(buf, 60_000)
			return err
		})
		reader.WaitInPoll(t, compTimeout)
		// The target starts reading (and sleeps whenever idle); the
		// response wakes the initiator.
		target := testenv.StartSleeper(func() error { return b.rcntr.Wait(1+total, 60_000) })
		require.NoError(t, reader.Wait(t, compTimeout))
		require.Equal(t, "first", buf[0].Context)
		require.Equal(t, uint64(0), binary.LittleEndian.Uint64(old))

		fetched, err := fetchAdds{n: a, peer: a.peers[0], key: key, off: off, total: total, depth: 16,
			timeout: compTimeout}.run()
		require.NoError(t, err)
		require.Len(t, fetched, total)
		checkPermutation(t, [][]uint64{fetched})
		require.NoError(t, target.Wait(t, compTimeout))
		require.Equal(t, uint64(total), binary.LittleEndian.Uint64(b.mem[off:]))

		// Idle again: the target's reader sleeps, and a request wakes it.
		target = testenv.StartSleeper(func() error { return b.rcntr.Wait(2+total, 60_000) })
		target.WaitInPoll(t, compTimeout)
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peers[0], 0, key,
			fatomic.UINT64, fatomic.SUM, "last"))
		require.Equal(t, "last", waitComp(t, a.txCQ).Context)
		require.Equal(t, uint64(1), binary.LittleEndian.Uint64(old))
		require.NoError(t, target.Wait(t, compTimeout))
	})
}

// TestAutoProgressReaderAssists: with auto progress (the default), per
// transport, an SRead with nothing queued sleeps in poll(2) on its
// endpoint's descriptors and receives the response itself, a pipelined
// run with readers on both sides executes every fetch-add exactly once,
// and once nobody reads, the receive goroutine serves requests again.
func TestAutoProgressReaderAssists(t *testing.T) {
	testenv.RequirePriv(t)
	const total = 2000
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{})
		a, b := net.nodes[sideA][0], net.target()
		key := b.region.Key()
		const off = 64

		buf := make([]fabric.CQEntry, 1)
		reader := testenv.StartSleeper(func() error {
			_, err := a.txCQ.SRead(buf, 60_000)
			return err
		})
		reader.WaitInPoll(t, compTimeout)
		old := make([]byte, 8)
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peers[0], 0, key,
			fatomic.UINT64, fatomic.SUM, "first"))
		require.NoError(t, reader.Wait(t, compTimeout))
		require.Equal(t, "first", buf[0].Context)

		target := testenv.StartSleeper(func() error { return b.rcntr.Wait(1+total, 60_000) })
		fetched, err := fetchAdds{n: a, peer: a.peers[0], key: key, off: off, total: total, depth: 16,
			timeout: compTimeout}.run()
		require.NoError(t, err)
		checkPermutation(t, [][]uint64{fetched})
		require.NoError(t, target.Wait(t, compTimeout))

		// Nobody reads B's CQs or counter: its receive goroutine serves.
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peers[0], off, key,
			fatomic.UINT64, fatomic.SUM, "last"))
		require.Equal(t, "last", waitComp(t, a.txCQ).Context)
		require.Equal(t, uint64(total), binary.LittleEndian.Uint64(old))
	})
}
