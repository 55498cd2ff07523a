package av

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestSlabChunks: an AV grown past slabAfter chunks takes its chunks from
// slabs (and one opened for that many addresses from the start); every
// address on either side of that boundary is found both ways, removed
// ones are gone, and indices freed in a slab's chunks are handed out
// again.
func TestSlabChunks(t *testing.T) {
	n := (slabAfter+3)*chunkLen + 17
	for _, count := range []int{0, n} {
		a, err := Open(Attr{Type: TypeTable, Count: count}, nil, WithMirror(nil))
		require.NoError(t, err)
		peers := addrs(n)
		out := make([]fi.Addr, n)
		got, err := a.InsertAddrPort(peers, out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, n, got)
		require.Equal(t, count > 0, a.t.bigHint)
		require.NotEmpty(t, a.t.slab, "the last chunks came from a slab with room left")
		for i, p := range peers {
			ap, ok := a.AddrPort(out[i])
			require.True(t, ok, "index %d", i)
			require.Equal(t, p, ap)
			require.Equal(t, out[i], a.FIAddr(p))
		}
		gone := []fi.Addr{out[5], out[slabAfter*chunkLen+1], out[n-1]}
		require.NoError(t, a.Remove(gone, 0))
		for _, h := range gone {
			_, ok := a.AddrPort(h)
			require.False(t, ok)
		}
		again := make([]fi.Addr, 3)
		_, err = a.InsertAddrPort([]netip.AddrPort{peers[5], peers[slabAfter*chunkLen+1], peers[n-1]}, again, 0, nil)
		require.NoError(t, err)
		require.ElementsMatch(t, gone, again, "freed indices are handed out again, lowest first")
		require.NoError(t, a.Close())
	}
}
