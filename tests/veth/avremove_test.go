package veth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// TestAVRemove: over the veth pair, when the target takes the initiator
// out of its AV it stops serving it (its datapath forgets the peer), the
// initiator's operations then stay pending, and when the initiator takes
// the target out of its own AV every pending operation completes with
// FI_ECANCELED (not a hang, not a success, not FI_ETIMEDOUT). After both
// insert each other again, new operations work in a new session and the
// cancelled fetch-add executed at most once.
func TestAVRemove(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		n := newNet(t, tc, netOpts{})
		a, b := n.nodes[sideA][0], n.target()
		key := b.region.Key()
		res := make([]byte, 8)
		fetchAdd := func(ctx string) {
			require.NoError(t, a.ep.FetchAtomic(le64(1), 1, mr.Desc{}, res, mr.Desc{}, a.peers[0], 0, key,
				fatomic.UINT64, fatomic.SUM, ctx))
		}
		fetchAdd("warm")
		require.Equal(t, "warm", waitComp(t, a.txCQ).Context)

		require.NoError(t, b.av.Remove([]fi.Addr{b.peers[0]}, 0))
		require.NoError(t, a.ep.Write(bytes.Repeat([]byte{5}, 100<<10), mr.Desc{}, a.peers[0], 4096, key, "write"))
		require.NoError(t, a.ep.Send([]byte("hello"), mr.Desc{}, a.peers[0], "send"))
		fetchAdd("fetch")
		buf := make([]fabric.CQEntry, 1)
		_, err := a.txCQ.SRead(buf, 200)
		require.ErrorIs(t, err, fi.EAGAIN, "operations to a peer that stopped serving us completed: %+v", buf[0])

		require.NoError(t, a.av.Remove([]fi.Addr{a.peers[0]}, 0))
		got := map[any]fi.Errno{}
		for range 3 {
			_, err := a.txCQ.SRead(buf, int(compTimeout.Milliseconds()))
			require.True(t, errors.Is(err, fi.EAVAIL), "want an error completion, got %v %+v", err, buf[0])
			e, err := a.txCQ.ReadErr(0)
			require.NoError(t, err)
			got[e.Context] = e.Err
		}
		require.Equal(t, map[any]fi.Errno{"write": fi.ECANCELED, "send": fi.ECANCELED, "fetch": fi.ECANCELED}, got)

		a.peers[0] = insert(t, a.av, b.ep.GetName())
		b.peers[0] = insert(t, b.av, a.ep.GetName())
		fetchAdd("again")
		require.Equal(t, "again", waitComp(t, a.txCQ).Context)
		// The cancelled fetch-add executed at most once: a packet of it sent
		// before the cancel may still reach the target once it serves us again.
		require.Contains(t, []uint64{1, 2}, binary.LittleEndian.Uint64(res), "fetch-adds executed")
		msg := make([]byte, 16)
		require.NoError(t, b.ep.Recv(msg, mr.Desc{}, fi.AddrUnspec, "recv"))
		require.NoError(t, a.ep.Send([]byte("after"), mr.Desc{}, a.peers[0], "send2"))
		require.Equal(t, "send2", waitComp(t, a.txCQ).Context)
		require.Equal(t, "recv", waitComp(t, b.rxCQ).Context)
		require.Equal(t, "after", string(msg[:5]))
	})
}
