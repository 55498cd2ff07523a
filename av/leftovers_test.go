package av

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestMapGenerationExhaustedRetiresIndex drives one FI_AV_MAP index
// through every generation with Insert and Remove: each occupant's handle
// is new, and once the occupant of generation 65535 leaves, the index is
// retired instead of wrapping to generation 1, so no handle ever returned
// names a later peer; the next address takes a new index.
func TestMapGenerationExhaustedRetiresIndex(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	peers := [2]netip.AddrPort{ap("10.9.0.1:7471"), ap("10.9.0.2:7471")}
	one := fiAddrs(1)
	var stale []fi.Addr // a sample of the handles index 0 had
	for g := 1; g <= maxGen; g++ {
		n, err := a.InsertAddrPort(peers[g%2:g%2+1], one, 0, nil)
		if err != nil || n != 1 {
			t.Fatalf("generation %d: insert = %d, %v", g, n, err)
		}
		h := one[0]
		if want := fi.Addr(g)<<32 | 0; h != want {
			t.Fatalf("generation %d: handle %#x, want %#x", g, uint64(h), uint64(want))
		}
		if g <= 3 || g%4099 == 0 || g >= maxGen-2 {
			stale = append(stale, h)
		}
		if err := a.Remove([]fi.Addr{h}, 0); err != nil {
			t.Fatalf("generation %d: remove: %v", g, err)
		}
	}

	// Index 0 is retired: the next peer gets index 1, generation 1.
	n, err := a.InsertAddrPort(peers[1:], one, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	fresh := one[0]
	require.Equal(t, fi.Addr(1)<<32|1, fresh)
	require.Equal(t, fresh, a.FIAddr(peers[1]))
	v, ok := f.get(a.ID(), peers[1])
	require.True(t, ok)
	require.Equal(t, uint64(fresh), v.FiAddr, "kernel copy")

	for _, h := range stale {
		_, ok := a.AddrPort(h)
		require.False(t, ok, "stale handle %#x resolves", uint64(h))
		_, err := a.Lookup(h, make([]byte, SockaddrInLen))
		require.ErrorIs(t, err, fi.EINVAL, "lookup of stale handle %#x", uint64(h))
		require.ErrorIs(t, a.Remove([]fi.Addr{h}, 0), fi.EINVAL, "remove of stale handle %#x", uint64(h))
	}
	// The retired index stays out: churning the new index does not bring
	// index 0 back, and the AV keeps working.
	require.NoError(t, a.Remove([]fi.Addr{fresh}, 0))
	_, err = a.InsertAddrPort(peers[:1], one, 0, nil)
	require.NoError(t, err)
	require.Equal(t, fi.Addr(2)<<32|1, one[0])
	require.Equal(t, 1, a.t.retired)
	require.Equal(t, 1, a.Count())
	f.requireInStep(t, a)
}

// setGen sets the generation of index idx, a test hook for the
// generations Insert and Remove take 65535 rounds to reach.
func setGen(a *AV, idx uint32, gen uint16) {
	a.mu.Lock()
	a.t.dense(idx).gen = gen
	a.mu.Unlock()
}

// TestGenerationAtMax: an FI_AV_TABLE index, whose handles carry no
// generation, is reused past the last generation (lowest index first);
// an FI_AV_MAP index held after a refused FI_MORE write (see LostError) is
// retired when Remove releases it at the last generation.
func TestGenerationAtMax(t *testing.T) {
	t.Run("TABLE", func(t *testing.T) {
		a, f := openTest(t, Attr{Type: TypeTable})
		one := fiAddrs(1)
		_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.9.1.1:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(0), one[0])
		setGen(a, 0, maxGen)
		require.NoError(t, a.Remove(one, 0))
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.1.2:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(0), one[0], "TABLE reuses the lowest index")
		require.Equal(t, uint16(1), a.t.dense(0).gen, "wrapped past 0")
		require.Zero(t, a.t.retired)
		f.requireInStep(t, a)
	})
	t.Run("MAP held", func(t *testing.T) {
		a, f := openTest(t, Attr{Type: TypeMap})
		one := fiAddrs(1)
		_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.1:1")}, one, 0, nil)
		require.NoError(t, err)
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.2:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(1)<<32|1, one[0])
		setGen(a, 1, maxGen-1)
		require.NoError(t, a.Remove([]fi.Addr{fi.Addr(maxGen-1)<<32 | 1}, 0))

		// The kernel copy is full: the FI_MORE insert's write is refused
		// when the next insert makes it, and index 1 stays held.
		f.limit = 1
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.3:1")}, one, fi.MORE, nil)
		require.NoError(t, err)
		held := one[0]
		require.Equal(t, fi.Addr(maxGen)<<32|1, held)
		_, err = a.InsertAddrPort(nil, nil, 0, nil)
		var lost *LostError
		require.True(t, errors.As(err, &lost), "%v", err)
		require.Equal(t, []fi.Addr{held}, lost.Handles)
		require.Equal(t, fi.AddrNotAvail, one[0])

		require.NoError(t, a.Remove([]fi.Addr{held}, 0), "releases the held index")
		require.Equal(t, 1, a.t.retired)
		require.ErrorIs(t, a.Remove([]fi.Addr{held}, 0), fi.EINVAL)
		f.limit = 0
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.3:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(1)<<32|2, one[0], "index 1 retired: a new index")
		_, ok := a.AddrPort(held)
		require.False(t, ok)
		f.requireInStep(t, a)
	})
}
