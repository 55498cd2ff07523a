package fabric_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestManualProgress: with FI_PROGRESS_MANUAL nothing moves until the
// application reads; the target's counter wait and the initiator's CQ
// reads drive both sides.
func TestManualProgress(t *testing.T) {
	a := newNode(t, nodeOpts{progress: fabric.ProgressManual})
	b := newNode(t, nodeOpts{progress: fabric.ProgressManual})
	connect(t, a, b)
	key := b.region.Key()

	// The target makes progress only while its application reads: drive it
	// from a goroutine waiting on its remote-access counter.
	done := make(chan error, 1)
	go func() { done <- b.rcntr.Wait(200, 10000) }()

	one := binary.LittleEndian.AppendUint64(nil, 1)
	old := make([]byte, 8)
	buf := make([]fabric.CQEntry, 1)
	for i := uint64(0); i < 200; i++ {
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, a.peer, 0, key, fatomic.UINT64, fatomic.SUM, i))
		n, err := a.txCQ.SRead(buf, 5000)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, i, buf[0].Context)
		require.Equal(t, i, binary.LittleEndian.Uint64(old))
	}
	require.NoError(t, <-done)
	require.Equal(t, uint64(200), b.rcntr.Read())

	// Nothing is pending: SRead times out (driving progress meanwhile).
	_, err := a.txCQ.SRead(buf, 50)
	require.ErrorIs(t, err, fi.EAGAIN)
}
