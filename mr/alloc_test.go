package mr_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/mr"
)

// regCloseAllocs is the allocations of one fi_mr_reg + fi_close of a
// single buffer, synchronous, under the domain's auth key.
func regCloseAllocs(t *testing.T, tab *mr.Table) float64 {
	buf := make([]byte, 4096)
	// Warm: the first batch of closes waits for its stamp, so the first
	// RetireBatch registrations allocate their regions.
	for range mr.RetireBatch {
		m, err := tab.Reg(buf, remoteBits, 0, unitKey, 0, nil)
		require.NoError(t, err)
		require.NoError(t, m.Close())
	}
	return testing.AllocsPerRun(200, func() {
		m, err := tab.Reg(buf, remoteBits, 0, unitKey, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRegCloseAllocs: with recycling a registration allocates less than
// one object — the region object is reused, its handle comes from a slab
// allocated once per 32 registrations, and there are no side objects for
// bindings, auth keys or completion it does not use, no scratch for the
// mirror call. (AllocsPerRun rounds the 1/32 down.)
func TestRegCloseAllocs(t *testing.T) {
	tab, err := mr.NewTable(mr.Config{AuthKey: []byte("domain"), Epochs: epoch.New()})
	require.NoError(t, err)
	require.Equal(t, 0.0, regCloseAllocs(t, tab))
	require.LessOrEqual(t, tab.PoolStats().Fresh, uint64(mr.RetireBatch+1), "regions allocated after the first batch")
}

// TestRegCloseFreshAllocs: without recycling it allocates the region.
func TestRegCloseFreshAllocs(t *testing.T) {
	tab, err := mr.NewTable(mr.Config{AuthKey: []byte("domain")})
	require.NoError(t, err)
	require.Equal(t, 1.0, regCloseAllocs(t, tab))
}

// TestRegCloseBPFAllocs is TestRegCloseAllocs with the kernel's MR table
// kept in step (privileged): the MapMirror is written from the stack.
func TestRegCloseBPFAllocs(t *testing.T) {
	tab, _ := newBPFTable(t, 0, 1, 0)
	require.Equal(t, 0.0, regCloseAllocs(t, tab))
}
