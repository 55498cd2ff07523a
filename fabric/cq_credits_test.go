package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestCQCreditsReclaimedWhenFull: an endpoint's transmit post takes a
// batch of CQ slots while the CQ is far from full; another user of the CQ
// (here the endpoint's own receives, bound to the same CQ) still fills it
// to exactly its size, the unused credits taken back, and then both are
// refused. Closing the endpoint gives back what it still holds.
func TestCQCreditsReclaimedWhenFull(t *testing.T) {
	const size = 64
	a, _ := pair(t, sideOpts{txCQ: &fabric.CQAttr{Size: size, WaitObj: fi.WaitUnspec}, noRxCQ: true, noEnable: true}, sideOpts{})
	require.NoError(t, a.ep.Bind(a.txCQ, fi.RECV))
	require.NoError(t, a.ep.Enable())

	require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, "w0"))
	queued(t, a.txCQ, 1)
	require.Greater(t, a.txCQ.Reserved(), 1, "a batch of credits was taken")
	for i := range size - 1 {
		require.NoError(t, a.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, i), "receive %d of %d slots", i+1, size-1)
	}
	require.Equal(t, size-1, a.txCQ.Reserved(), "the credits were taken back")
	require.ErrorIs(t, a.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil), fi.EAGAIN)
	require.ErrorIs(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, nil), fi.EAGAIN)
	require.Equal(t, "w0", comp(t, a.txCQ).Context)
	require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, "w1"), "a read entry frees a slot")
	require.Equal(t, size, a.txCQ.Reserved()+a.txCQ.Queued())
	require.Equal(t, "w1", comp(t, a.txCQ).Context)

	require.NoError(t, a.ep.Close())
	require.Zero(t, a.txCQ.Reserved(), "nothing promised once closed: the receives cancelled, the credits given back")
}

// TestCQCreditsGivenBackOnClose: the credits an idle endpoint holds go
// back to the CQ when it closes.
func TestCQCreditsGivenBackOnClose(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	for i := range 3 {
		require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, i))
		require.Equal(t, i, comp(t, a.txCQ).Context)
	}
	require.Positive(t, a.txCQ.Reserved(), "credits held while idle")
	require.NoError(t, a.ep.Close())
	require.Zero(t, a.txCQ.Reserved())
}
