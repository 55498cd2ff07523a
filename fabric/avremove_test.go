package fabric_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestAVRemoveCancelsPending: operations pending to an address complete
// with FI_ECANCELED when fi_av_remove takes the address out of the AV
// (without it they would retry until FI_ETIMEDOUT), and once the address
// is inserted again new operations work in a new session.
func TestAVRemoveCancelsPending(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	bName := b.ep.GetName()
	// A session exists in both directions' state.
	res := make([]byte, 8)
	require.NoError(t, a.ep.FetchAtomic(le(1), 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.SUM, "warm"))
	require.Equal(t, "warm", comp(t, a.txCQ).Context)

	// b stops serving a (a leaves b's AV, so b drops its requests): a's
	// next operations stay pending, retransmitted.
	require.NoError(t, b.av.Remove([]fi.Addr{b.peer}, 0))
	big := bytes.Repeat([]byte{9}, 100<<10) // many packets
	require.NoError(t, a.ep.Write(big, mr.Desc{}, a.peer, 4096, regionKey, "write"))
	require.NoError(t, a.ep.Send([]byte("hello"), mr.Desc{}, a.peer, "send"))
	require.NoError(t, a.ep.FetchAtomic(le(1), 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.SUM, "fetch"))
	noComp(t, a.txCQ)

	require.NoError(t, a.av.Remove([]fi.Addr{a.peer}, 0))
	got := map[any]fi.Errno{}
	for range 3 {
		e := errComp(t, a.txCQ)
		got[e.Context] = e.Err
	}
	require.Equal(t, map[any]fi.Errno{"write": fi.ECANCELED, "send": fi.ECANCELED, "fetch": fi.ECANCELED}, got)
	noComp(t, a.txCQ)

	// Inserted again on both sides, the peers talk in a new session.
	a.peer = a.insert(t, bName)
	b.peer = b.insert(t, a.ep.GetName())
	require.NoError(t, a.ep.FetchAtomic(le(1), 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.SUM, "again"))
	require.Equal(t, "again", comp(t, a.txCQ).Context)
	// The cancelled fetch-add executed at most once: a packet of it sent
	// before the cancel may still reach the target once it serves us again.
	require.Contains(t, []uint64{1, 2}, binary.LittleEndian.Uint64(res), "fetch-adds executed")
	msg := make([]byte, 16)
	require.NoError(t, b.ep.Recv(msg, mr.Desc{}, fi.AddrUnspec, "recv"))
	require.NoError(t, a.ep.Send([]byte("after"), mr.Desc{}, a.peer, "send2"))
	require.Equal(t, "send2", comp(t, a.txCQ).Context)
	require.Equal(t, "recv", comp(t, b.rxCQ).Context)
	require.Equal(t, "after", string(msg[:5]))
}

func le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
