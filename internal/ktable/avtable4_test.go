package ktable_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// peer4 is an IPv4 peer (::ffff:10.x.y.z) a compact table takes.
func peer4(i int) ktable.Peer {
	return ktable.Peer{Port: uint16(1 + i%60000), Addr: [2]uint64{0, 0xffff0000 | uint64(0x0a000000+i)<<32},
		FiAddr: uint64(i) << 20, AuthKeyID: uint16(i % 7)}
}

// TestAVTable4 is TestAVTable for a compact table: every peer read back
// (fi_addr up to 48 bits, auth key id and user-ID flag in the 16-bit
// seq), rewritten, removed, listed by a second mapping, and a peer it
// cannot hold (IPv6, a larger fi_addr) refused with ErrWide, never
// truncated.
func TestAVTable4(t *testing.T) {
	testenv.RequirePriv(t)
	const n = 20000
	nb := ktable.AVTable4Buckets(n)
	require.NotZero(t, nb&(nb-1))
	tab, err := ktable.CreateAVTable4(avSpec(), nb, ktable.RandomSeed())
	require.NoError(t, err)
	defer tab.Close()
	require.True(t, tab.Compact())
	require.Equal(t, nb*ktable.AVT4Ways, tab.Slots())
	ps := make([]ktable.Peer, n)
	for i := range ps {
		ps[i] = peer4(i)
		require.True(t, ktable.Fits4(&ps[i]))
	}
	got, err := tab.InsertMany(ps)
	require.NoError(t, err)
	require.Equal(t, n, got)
	require.Equal(t, n, tab.Len())
	for i := range ps {
		p, ok := tab.Get(ps[i].Port, ps[i].Addr)
		require.True(t, ok, "peer %d", i)
		require.Equal(t, ps[i], p)
	}
	_, ok := tab.Get(ps[0].Port+1, ps[0].Addr)
	require.False(t, ok, "another port is another peer")

	p := ps[5]
	p.FiAddr, p.UserIDSet, p.AuthKeyID = 1<<48-1, true, 65535
	require.NoError(t, tab.Put(&p))
	require.Equal(t, n, tab.Len())
	back, ok := tab.Get(p.Port, p.Addr)
	require.True(t, ok)
	require.Equal(t, p, back)
	p.UserIDSet = false
	for range 3 {
		require.NoError(t, tab.Put(&p))
	}
	back, _ = tab.Get(p.Port, p.Addr)
	require.Equal(t, p, back)

	// Peers it cannot hold: refused, the table unchanged.
	wide := p
	wide.FiAddr = 1 << 48
	require.ErrorIs(t, tab.Put(&wide), ktable.ErrWide)
	back, _ = tab.Get(p.Port, p.Addr)
	require.Equal(t, p, back, "a refused Put leaves the entry")
	v6 := ktable.Peer{Port: 7, Addr: [2]uint64{0xfd, 1}, FiAddr: 1}
	require.False(t, ktable.Fits4(&v6))
	require.ErrorIs(t, tab.Insert(&v6), ktable.ErrWide)
	more := []ktable.Peer{peer4(n), peer4(n + 1), v6, peer4(n + 2)}
	got, err = tab.InsertMany(more)
	require.ErrorIs(t, err, ktable.ErrWide)
	require.Equal(t, 2, got, "the peers before the one that does not fit are in")
	require.Equal(t, n+2, tab.Len())
	for _, q := range more[:2] {
		require.True(t, tab.Delete(q.Port, q.Addr))
	}
	_, ok = tab.Get(v6.Port, v6.Addr)
	require.False(t, ok)

	for i := 0; i < n; i += 2 {
		require.True(t, tab.Delete(ps[i].Port, ps[i].Addr))
	}
	require.False(t, tab.Delete(ps[0].Port, ps[0].Addr))
	require.Equal(t, n/2, tab.Len())

	ro, err := ktable.OpenAVTableReadOnly(tab.Map())
	require.NoError(t, err)
	require.True(t, ro.Compact())
	seen := 0
	ro.Each(func(q *ktable.Peer) bool {
		i := int(q.FiAddr >> 20)
		if q.FiAddr == 1<<48-1 {
			i = 5
		}
		require.Equal(t, 1, i%2, "removed peer %d listed", i)
		seen++
		return true
	})
	require.Equal(t, n/2, seen)
	require.NoError(t, ro.Close())

	for i := 0; i < n; i += 2 {
		require.NoError(t, tab.Insert(&ps[i]))
	}
	require.Equal(t, n, tab.Len())

	m, err := tab.Map().Clone()
	require.NoError(t, err)
	tk, err := ktable.TakeAVTable(m)
	require.NoError(t, err)
	require.True(t, tk.Compact())
	require.Zero(t, tk.Len())
	_, ok = tab.Get(ps[1].Port, ps[1].Addr)
	require.False(t, ok)
	require.NoError(t, tk.Insert(&ps[1]))
	back, ok = tk.Get(ps[1].Port, ps[1].Addr)
	require.True(t, ok)
	require.Equal(t, ps[1], back)
	require.NoError(t, tk.Close())
}

// TestAVTable4Full: a peer whose two buckets are full is refused
// (ErrFull), not written over another.
func TestAVTable4Full(t *testing.T) {
	testenv.RequirePriv(t)
	tab, err := ktable.CreateAVTable4(avSpec(), 2, ktable.RandomSeed())
	require.NoError(t, err)
	defer tab.Close()
	ps := make([]ktable.Peer, 2*ktable.AVT4Ways+1)
	for i := range ps {
		ps[i] = peer4(i)
	}
	got, err := tab.InsertMany(ps)
	require.ErrorIs(t, err, ktable.ErrFull)
	require.Equal(t, 2*ktable.AVT4Ways, got)
	for i := range got {
		p, ok := tab.Get(ps[i].Port, ps[i].Addr)
		require.True(t, ok)
		require.Equal(t, ps[i], p)
	}
	require.ErrorIs(t, tab.Insert(&ps[got]), ktable.ErrFull)
	tab.Reset()
	require.Zero(t, tab.Len())
	got, err = tab.InsertMany(ps[:2*ktable.AVT4Ways])
	require.NoError(t, err)
	require.Equal(t, 2*ktable.AVT4Ways, got)
}
