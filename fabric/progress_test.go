package fabric_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// manualNode is an endpoint on a domain with FI_PROGRESS_MANUAL.
type manualNode struct {
	ep   *fabric.Endpoint
	av   *av.AV
	cq   *fabric.CQ
	cntr *fabric.Cntr
	reg  *mr.MR
}

func newManualNode(t *testing.T) *manualNode {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Addr: netip.MustParseAddr("127.0.0.1"), Progress: fabric.ProgressManual}, nil)
	require.NoError(t, err)
	n := &manualNode{}
	n.ep, err = d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	n.av, err = d.AVOpen(av.Attr{}, nil)
	require.NoError(t, err)
	n.cq, err = d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	n.cntr, err = d.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	require.NoError(t, n.ep.Bind(n.av, 0))
	require.NoError(t, n.ep.Bind(n.cq, fi.TRANSMIT|fi.RECV))
	require.NoError(t, n.ep.Bind(n.cntr, fi.REMOTE_WRITE))
	require.NoError(t, n.ep.Enable())
	n.reg, err = d.MRReg(make([]byte, 4096), fi.REMOTE_READ|fi.REMOTE_WRITE, 0, 0x3333, 0, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, n.ep.Close())
		require.NoError(t, n.reg.Close())
		require.NoError(t, n.cq.Close())
		require.NoError(t, n.cntr.Close())
		require.NoError(t, n.av.Close())
		require.NoError(t, d.Close())
	})
	return n
}

// TestManualProgress: with FI_PROGRESS_MANUAL nothing moves until the
// application reads; the target's counter wait and the initiator's CQ
// reads drive both sides.
func TestManualProgress(t *testing.T) {
	a, b := newManualNode(t), newManualNode(t)
	fa := make([]fi.Addr, 1)
	_, err := a.av.Insert([][]byte{b.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	peer := fa[0]
	_, err = b.av.Insert([][]byte{a.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)

	// The target makes progress only while its application reads: drive it
	// from a goroutine waiting on its counter.
	done := make(chan error, 1)
	go func() { done <- b.cntr.Wait(200, 10000) }()

	one := binary.LittleEndian.AppendUint64(nil, 1)
	old := make([]byte, 8)
	buf := make([]fabric.CQEntry, 1)
	for i := uint64(0); i < 200; i++ {
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, peer, 0, 0x3333, fatomic.UINT64, fatomic.SUM, i))
		n, err := a.cq.SRead(buf, 5000)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, i, buf[0].Context)
		require.Equal(t, i, binary.LittleEndian.Uint64(old))
	}
	require.NoError(t, <-done)
	require.Equal(t, uint64(200), b.cntr.Read())

	// Nothing is pending: SRead times out (driving progress meanwhile).
	_, err = a.cq.SRead(buf, 50)
	require.ErrorIs(t, err, fi.EAGAIN)
}
