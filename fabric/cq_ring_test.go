package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// TestCQRingGrows: a CQ's ring starts small and grows to its size as
// entries queue, keeping FIFO order across the wrap, and a full CQ still
// overruns at its size (fabtests' fi_cq_test opens 32768 CQs of the
// default size; their rings must not be allocated in full).
func TestCQRingGrows(t *testing.T) {
	d := openDomain(t)
	cq, err := d.CQOpen(fabric.CQAttr{Size: 300}, nil)
	require.NoError(t, err)
	defer cq.Close()
	require.Equal(t, 64, cq.RingLen())

	next, want := 0, 0
	push := func(n int) {
		for i := 0; i < n; i++ {
			cq.PushForTest(next)
			next++
		}
	}
	read := func(n int) {
		buf := make([]fabric.CQEntry, n)
		got, err := cq.Read(buf)
		require.NoError(t, err)
		require.Equal(t, n, got)
		for _, e := range buf {
			require.Equal(t, want, e.Context)
			want++
		}
	}
	push(50)
	read(40) // head moves: the next growth copies a wrapped ring
	push(100)
	require.Equal(t, 128, cq.RingLen())
	read(60)
	push(250) // 300 queued: full
	require.Equal(t, 300, cq.Queued())
	require.Equal(t, 300, cq.RingLen())
	cq.PushForTest(-1) // overrun: dropped
	require.Equal(t, 300, cq.Queued())
	read(300)
	_, err = cq.Read(make([]fabric.CQEntry, 1))
	require.ErrorIs(t, err, fi.EAGAIN)

	def, err := d.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	require.Equal(t, fabric.DefaultCQSize, def.Attr().Size)
	require.Equal(t, 64, def.RingLen())
	require.NoError(t, def.Close())
}
