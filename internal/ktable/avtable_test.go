package ktable_test

import (
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

func avSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Type: ebpf.Array, Flags: unix.BPF_F_MMAPABLE, KeySize: 4, ValueSize: ktable.AVTBucketSize}
}

func peer(i int) ktable.Peer {
	return ktable.Peer{Port: uint16(1 + i%60000), Addr: [2]uint64{uint64(i) * 0x9e3779b97f4a7c15, 0xffff0000 | uint64(i)<<32},
		FiAddr: uint64(i), AuthKeyID: uint16(i % 7)}
}

// TestAVTable fills a peer table sized for its peers (a bucket count that
// is no power of two), reads every peer back, rewrites, removes, resets,
// and has a second mapping (TakeAVTable, OpenAVTableReadOnly) see what the
// first wrote.
func TestAVTable(t *testing.T) {
	testenv.RequirePriv(t)
	const n = 20000
	nb := ktable.AVTableBuckets(n)
	require.NotZero(t, nb&(nb-1))
	tab, err := ktable.CreateAVTable(avSpec(), nb, ktable.RandomSeed())
	require.NoError(t, err)
	defer tab.Close()
	ps := make([]ktable.Peer, n)
	for i := range ps {
		ps[i] = peer(i)
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

	// Put rewrites in place, user-ID flag (seq bit 31) included, and
	// clears it again.
	p := ps[5]
	p.FiAddr, p.UserIDSet, p.AuthKeyID = 1<<60, true, 65535
	require.NoError(t, tab.Put(&p))
	require.Equal(t, n, tab.Len())
	back, ok := tab.Get(p.Port, p.Addr)
	require.True(t, ok)
	require.Equal(t, p, back)
	p.UserIDSet = false
	for range 3 { // the seq counter moves on, the flag stays what was written
		require.NoError(t, tab.Put(&p))
	}
	back, _ = tab.Get(p.Port, p.Addr)
	require.Equal(t, p, back)

	for i := 0; i < n; i += 2 {
		require.True(t, tab.Delete(ps[i].Port, ps[i].Addr))
	}
	require.False(t, tab.Delete(ps[0].Port, ps[0].Addr))
	require.Equal(t, n/2, tab.Len())

	ro, err := ktable.OpenAVTableReadOnly(tab.Map())
	require.NoError(t, err)
	seen := 0
	ro.Each(func(q *ktable.Peer) bool {
		i := int(q.FiAddr)
		if q.FiAddr == 1<<60 {
			i = 5
		}
		require.Equal(t, 1, i%2, "removed peer %d listed", i)
		seen++
		return true
	})
	require.Equal(t, n/2, seen)
	require.Equal(t, n/2, ro.Len())
	require.NoError(t, ro.Close())

	// Deleted slots are free again: the removed half goes back in.
	for i := 0; i < n; i += 2 {
		require.NoError(t, tab.Insert(&ps[i]))
	}
	require.Equal(t, n, tab.Len())

	// A second writer taking the table over (an AV given a parked
	// table's av_id) finds it emptied.
	m, err := tab.Map().Clone()
	require.NoError(t, err)
	tk, err := ktable.TakeAVTable(m)
	require.NoError(t, err)
	require.Zero(t, tk.Len())
	_, ok = tab.Get(ps[1].Port, ps[1].Addr)
	require.False(t, ok)
	require.NoError(t, tk.Insert(&ps[1]))
	require.NoError(t, tk.Close())
}

// TestAVTableFull checks that a key whose two buckets are full is refused
// (ErrFull), not written over another.
func TestAVTableFull(t *testing.T) {
	testenv.RequirePriv(t)
	tab, err := ktable.CreateAVTable(avSpec(), 2, ktable.RandomSeed())
	require.NoError(t, err)
	defer tab.Close()
	ps := make([]ktable.Peer, 2*ktable.AVTWays+1)
	for i := range ps {
		ps[i] = peer(i)
	}
	got, err := tab.InsertMany(ps)
	require.ErrorIs(t, err, ktable.ErrFull)
	require.Equal(t, 2*ktable.AVTWays, got)
	for i := range got {
		p, ok := tab.Get(ps[i].Port, ps[i].Addr)
		require.True(t, ok)
		require.Equal(t, ps[i], p)
	}
	tab.Reset()
	require.Zero(t, tab.Len())
	got, err = tab.InsertMany(ps[:2*ktable.AVTWays])
	require.NoError(t, err)
	require.Equal(t, 2*ktable.AVTWays, got)
}

// TestAVTableMapChecks refuses maps that are not peer tables.
func TestAVTableMapChecks(t *testing.T) {
	testenv.RequirePriv(t)
	_, err := ktable.CreateAVTable(avSpec(), 1, 1)
	require.Error(t, err)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, Flags: unix.BPF_F_MMAPABLE, KeySize: 4, ValueSize: ktable.BucketSize, MaxEntries: 3})
	require.NoError(t, err)
	defer m.Close()
	_, err = ktable.OpenAVTableReadOnly(m)
	require.Error(t, err, "a kernel table of 64-byte slots")
	m2, err := ebpf.NewMap(func() *ebpf.MapSpec { s := avSpec(); s.MaxEntries = 3; return s }())
	require.NoError(t, err)
	defer m2.Close()
	_, err = ktable.OpenAVTableReadOnly(m2)
	require.Error(t, err, "no header")
}

// BenchmarkAVFill1M enters 1,000,000 IPv4 peers into a fresh peer table
// sized for them, compact (AVTable4Buckets, as an AV starts) or of
// 32-byte slots (AVTableBuckets), 256 at a time as the av package does,
// in the writing thread's CPU time; "create" makes and maps the table
// only.
func BenchmarkAVFill1M(b *testing.B) {
	testenv.RequirePriv(b)
	const n = 1_000_000
	ps := make([]ktable.Peer, n)
	for i := range ps {
		ps[i] = ktable.Peer{Port: 0x1d1b, Addr: [2]uint64{0, 0xffff0000 | uint64(0x0a000000+i+1)<<32}, FiAddr: uint64(i)}
	}
	for _, kind := range []struct {
		name   string
		nb     int
		create func(*ebpf.MapSpec, int, uint64) (*ktable.AVTable, error)
	}{
		{"compact", ktable.AVTable4Buckets(n), ktable.CreateAVTable4},
		{"wide", ktable.AVTableBuckets(n), ktable.CreateAVTable},
	} {
		for _, part := range []string{"create", "insertmany"} {
			b.Run(kind.name+"/"+part, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var cpu int64
				for b.Loop() {
					start := testenv.ThreadCPU(b)
					tab, err := kind.create(avSpec(), kind.nb, 1)
					if err != nil {
						b.Fatal(err)
					}
					if part == "insertmany" {
						for lo := 0; lo < n; lo += 256 {
							if _, err := tab.InsertMany(ps[lo:min(lo+256, n)]); err != nil {
								b.Fatal(err)
							}
						}
					}
					cpu += testenv.ThreadCPU(b) - start
					b.StopTimer()
					tab.Close()
					b.StartTimer()
				}
				b.ReportMetric(float64(cpu)/1e9/float64(b.N), "cpu-s/op")
			})
		}
	}
}
