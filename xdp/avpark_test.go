package xdp_test

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// openAttachedAV opens an AV as fabric.Domain.AVOpen does on an
// attached interface.
func openAttachedAV(tb testing.TB, att *xdp.Attachment, count int) *av.AV {
	tb.Helper()
	id, err := att.NewAVID()
	require.NoError(tb, err)
	a, err := av.Open(av.Attr{Type: av.TypeTable, Count: count}, nil, av.WithKernelMap(att.AVMap),
		av.WithKernelID(id, func() { _ = att.ReleaseAVID(id) }))
	require.NoError(tb, err)
	return a
}

func innerMapID(t *testing.T, att *xdp.Attachment, id uint32) (ebpf.MapID, bool) {
	var inner ebpf.MapID
	err := att.AVMap.Lookup(id, &inner)
	if err != nil {
		require.ErrorIs(t, err, ebpf.ErrKeyNotExist)
		return 0, false
	}
	return inner, true
}

// TestAVTableParked: an AV of an attachment closed normally leaves its
// kernel table in av_map, empty (no entry of it is found after Close);
// the next AV is given the same av_id and takes that table over, without
// a map-in-map update; a table grown past what is parked leaves av_map.
func TestAVTableParked(t *testing.T) {
	p := newPair(t)
	att := p.mustAttach(t, xdp.Options{Mode: xdp.ModeAuto})
	peers := []netip.AddrPort{netip.MustParseAddrPort("10.9.0.1:7000"), netip.MustParseAddrPort("10.9.0.2:7000")}

	a := openAttachedAV(t, att, 0)
	id := a.ID()
	out := make([]fi.Addr, len(peers))
	_, err := a.InsertAddrPort(peers, out, 0, nil)
	require.NoError(t, err)
	entries, err := av.KernelEntries(att.AVMap)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	first, ok := innerMapID(t, att, id)
	require.True(t, ok)
	require.NoError(t, a.Close())

	parked, ok := innerMapID(t, att, id)
	require.True(t, ok, "the table stays in av_map")
	require.Equal(t, first, parked)
	entries, err = av.KernelEntries(att.AVMap)
	require.NoError(t, err)
	require.Empty(t, entries, "no entry of a closed AV")

	b := openAttachedAV(t, att, 0)
	require.Equal(t, id, b.ID(), "the lowest free av_id again")
	again, _ := innerMapID(t, att, id)
	require.Equal(t, first, again, "the parked table taken over")
	_, err = b.InsertAddrPort(peers[:1], out, 0, nil)
	require.NoError(t, err)
	entries, err = av.KernelEntries(att.AVMap)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	for k, v := range entries {
		require.Equal(t, id, k.AvId)
		require.Equal(t, uint64(out[0]), v.FiAddr)
	}

	// Grown past parkMaxBuckets: dropped at Close.
	many := make([]netip.AddrPort, 1000)
	for i := range many {
		many[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 8, byte(i >> 8), byte(i)}), 7000)
	}
	_, err = b.InsertAddrPort(many, nil, 0, nil)
	require.NoError(t, err)
	grown, _ := innerMapID(t, att, id)
	require.NotEqual(t, first, grown, "grown by a swap")
	require.NoError(t, b.Close())
	_, ok = innerMapID(t, att, id)
	require.False(t, ok, "a big table leaves av_map")
	entries, err = av.KernelEntries(att.AVMap)
	require.NoError(t, err)
	require.Empty(t, entries)

	// The next AV enters a new table.
	c := openAttachedAV(t, att, 0)
	require.Equal(t, id, c.ID())
	_, ok = innerMapID(t, att, id)
	require.True(t, ok)
	require.NoError(t, c.Close())
}

// BenchmarkAVOpenCloseAttached is fi_av_open + fi_close of an AV on a
// domain whose interface has xdpfab attached, as fabric.Domain.AVOpen
// opens it: an av_id from the attachment's owner registry, the AV's
// kernel table in the attachment's av_map (issue 15: at most 1 ms).
func BenchmarkAVOpenCloseAttached(b *testing.B) {
	testenv.RequirePriv(b)
	na, nb := testenv.NewNetns(b), testenv.NewNetns(b)
	v := testenv.NewVeth(b, na, nb, testenv.VethOptions{})
	b.Cleanup(func() { cleanupIn(nb, v.NameB) })
	var att *xdp.Attachment
	require.NoError(b, nb.Do(func() error {
		var err error
		att, err = xdp.Attach(v.NameB, xdp.Options{Mode: xdp.ModeAuto})
		return err
	}))
	b.Cleanup(func() { att.Close() })
	b.ReportAllocs()
	stop := testenv.CPUTimer(b)
	for b.Loop() {
		a := openAttachedAV(b, att, 0)
		if err := a.Close(); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}
