package fabric

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestCQRingGrows: the ring starts small and grows to the CQ's size while
// completions wrap around it; every completion comes out once, in order,
// errors in their place, and the CQ still holds exactly Size (reserve
// refuses the next with FI_EAGAIN).
func TestCQRingGrows(t *testing.T) {
	const size = 100 // not a power of two: the last growth is partial
	cq := &CQ{attr: CQAttr{Size: size, Format: CQFormatData}, ring: make([]cqItem, min(size, cqRingMin))}
	next, want := 0, 0
	buf := make([]CQEntry, 7)
	for round := range 5 {
		// Fill to a depth that grows each round, reading part of it back
		// so head moves and the queue wraps before the ring grows.
		depth := 10 + round*25
		for cq.n < min(depth, size) {
			require.NoError(t, cq.reserve())
			if next%13 == 0 {
				cq.completeErr(&CQErrEntry{CQEntry: CQEntry{Data: uint64(next)}, Err: fi.EIO}, true)
			} else {
				cq.complete(&CQEntry{Data: uint64(next)}, fi.AddrNotAvail, true)
			}
			next++
		}
		if cq.n == size {
			require.ErrorIs(t, cq.reserve(), fi.EAGAIN, "a full CQ promises no slot")
		}
		for k := 0; k < depth/2; {
			n, err := cq.Read(buf)
			if err != nil {
				require.ErrorIs(t, err, fi.EAVAIL)
				e, err := cq.ReadErr(0)
				require.NoError(t, err)
				require.Equal(t, uint64(want), e.Data)
				want++
				k++
				continue
			}
			for _, e := range buf[:n] {
				require.Equal(t, uint64(want), e.Data)
				want++
			}
			k += n
		}
		require.LessOrEqual(t, len(cq.ring), size)
	}
	require.Equal(t, size, len(cq.ring), "grown to the CQ's size")
}
