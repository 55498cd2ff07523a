package fabric_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestRMAWriteRacingRegionReuse: the target closes a region and registers
// another over other memory, again and again, so the domain's MR table
// fills the closed region's object again (its engine announcing quiescent
// points per received batch) while an initiator keeps writing to the
// first region's key. A write lands in that key's buffer or is refused
// with FI_EKEYREJECTED; never in the other registration's memory, whose
// region object the old key named a moment earlier. Run with -race: a
// region refilled while a request is being executed under it is also a
// reported race.
func TestRMAWriteRacingRegionReuse(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	const oldKey, newKey = 0x100, 0x200
	oldBuf := make([]byte, 4096)
	newBuf := make([]byte, 4096)
	access := fi.REMOTE_READ | fi.REMOTE_WRITE
	payload := bytes.Repeat([]byte{0xa5}, 64)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // the target's application: register, close, register elsewhere
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m, err := b.dom.MRReg(oldBuf, access, 0, oldKey, 0, nil)
			if err != nil {
				t.Error(err)
				return
			}
			if err := m.Close(); err != nil {
				t.Error(err)
				return
			}
			n, err := b.dom.MRReg(newBuf, access, 0, newKey, 0, nil)
			if err != nil {
				t.Error(err)
				return
			}
			if err := n.Close(); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	landed, refused := 0, 0
	buf := make([]fabric.CQEntry, 1)
	for i := 0; i < 3000 && !t.Failed(); i++ {
		require.NoError(t, a.ep.Write(payload, mr.Desc{}, a.peer, uint64(i%64)*64, oldKey, i))
		_, err := a.txCQ.SRead(buf, waitMs)
		if errors.Is(err, fi.EAVAIL) {
			e, rerr := a.txCQ.ReadErr(0)
			require.NoError(t, rerr)
			require.Equal(t, fi.EKEYREJECTED, e.Err, "write %d", i)
			refused++
			continue
		}
		require.NoError(t, err)
		landed++
	}
	close(stop)
	wg.Wait()
	// The target's receive side stops before the buffers are read: its
	// writes into them are ordered before the checks by that, not by the
	// responses' UDP round trip, which the race detector does not see.
	require.NoError(t, b.ep.Close())
	st := b.dom.MRs().PoolStats()
	t.Logf("%d writes landed, %d refused; pool %+v", landed, refused, st)
	require.Equal(t, make([]byte, len(newBuf)), newBuf, "a write through the old key reached the new registration")
	require.NotZero(t, st.Reused, "the table must recycle regions under the traffic")
	if landed > 0 {
		require.NotEqual(t, make([]byte, len(oldBuf)), oldBuf)
	}
}
