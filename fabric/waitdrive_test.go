package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// TestWaitSetDrivesManualProgress: under manual progress nothing moves
// unless the application calls in, and fi_wait on a wait set is such a
// call: Wait drives the endpoints of its CQs and counters, so a message
// sent to a side that only waits on its set arrives, and the set's Wait
// returns for it instead of timing out.
func TestWaitSetDrivesManualProgress(t *testing.T) {
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	inSet := &fabric.CQAttr{WaitObj: fi.WaitSet, WaitSet: set}
	manual := fabric.DomainAttr{Progress: fabric.ProgressManual}
	a, b := pair(t, sideOpts{dom: manual, rxCQ: inSet, txCQ: inSet, cntrs: fi.RECV},
		sideOpts{dom: manual})
	t.Cleanup(func() {
		a.close(t) // its CQs leave the set
		require.NoError(t, set.Close())
	})

	buf := make([]byte, 16)
	require.NoError(t, a.ep.Recv(buf, a.region.Desc(), fi.AddrUnspec, "recv"))
	require.ErrorIs(t, set.Wait(0), fi.ETIMEDOUT, "nothing yet")
	require.NoError(t, b.ep.Send([]byte("drive me"), b.region.Desc(), b.peer, "send"))
	// B's reader drives B (its transmissions and retransmissions); A
	// only waits on its set.
	sent := startRead(func() (int, error) { return b.txCQ.SRead(make([]fabric.CQEntry, 1), waitMs) })
	require.NoError(t, set.Wait(waitMs))
	require.Equal(t, "recv", comp(t, a.rxCQ).Context)
	require.Equal(t, "drive me", string(buf[:8]))
	r := awaitRead(t, sent, "B's send completion")
	require.NoError(t, r.err)
	require.Equal(t, 1, r.n)
	require.Equal(t, uint64(1), a.cntr[fi.RECV].Read())
}
