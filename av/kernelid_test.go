package av

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestWithKernelID: an AV given an id by its domain (xdp.NewAVID) keys its
// kernel entries with it, and calls release only once Close has removed
// them; a named AV or an id with the named-AV bit is refused.
func TestWithKernelID(t *testing.T) {
	testenv.RequirePriv(t)
	m, err := NewKernelMap(1024)
	require.NoError(t, err)
	defer m.Close()

	const id = 1<<24 + 7
	released := 0
	a, err := Open(Attr{}, nil, WithKernelMap(m), WithKernelID(id, func() { released++ }))
	require.NoError(t, err)
	require.Equal(t, uint32(id), a.ID())
	out := fiAddrs(3)
	n, err := a.InsertAddrPort(addrs(3), out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	entries := kernelEntries(t, m)
	require.Len(t, entries, 3)
	for k := range entries {
		require.Equal(t, uint32(id), k.AvId)
	}
	require.Zero(t, released, "not while the entries are there")
	require.NoError(t, a.Close())
	require.Empty(t, kernelEntries(t, m))
	require.Equal(t, 1, released)

	// Without a kernel copy, release comes with Close all the same.
	b, err := Open(Attr{}, nil, WithMirror(nil), WithKernelID(id, func() { released++ }))
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.Equal(t, 2, released)

	for _, c := range []struct {
		attr Attr
		id   uint32
	}{{Attr{Name: "kernel-id-named"}, id}, {Attr{}, 1<<31 | 3}} {
		_, err = Open(c.attr, nil, WithKernelMap(m), WithKernelID(c.id, func() { released++ }))
		require.ErrorIs(t, err, fi.EINVAL, "%+v id %#x", c.attr, c.id)
	}
	require.Equal(t, 2, released, "a refused Open does not release")
}
