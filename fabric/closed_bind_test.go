package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// TestBindClosedAVAndEQ: fi_ep_bind of a closed AV (one the domain opened
// or av.Open's) or of a nil *av.AV, and fi_domain_bind of a closed or nil
// EQ, fail with FI_EINVAL without panicking and without binding anything:
// the endpoint then binds an open AV, the domain an open EQ, and
// everything closes afterwards. A closed domain refuses an EQ too.
func TestBindClosedAVAndEQ(t *testing.T) {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Transport: fabric.TransportUDP}, nil)
	require.NoError(t, err)
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)

	domAV, err := d.AVOpen(av.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, domAV.Close())
	plainAV, err := av.Open(av.Attr{Type: av.TypeMap}, nil, av.WithMirror(nil))
	require.NoError(t, err)
	require.NoError(t, plainAV.Close())
	require.ErrorIs(t, ep.Bind(domAV, 0), fi.EINVAL, "closed AV of the domain")
	require.ErrorIs(t, ep.Bind(plainAV, 0), fi.EINVAL, "closed AV")
	require.ErrorIs(t, ep.Bind((*av.AV)(nil), 0), fi.EINVAL, "nil AV")

	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, q.Close())
	require.ErrorIs(t, d.Bind(q, fi.REG_MR), fi.EINVAL, "closed EQ")
	require.ErrorIs(t, d.Bind(nil, fi.REG_MR), fi.EINVAL, "nil EQ")
	require.ErrorIs(t, d.Bind(q, 0), fi.EBADFLAGS)

	// Nothing was bound: an open AV and an open EQ bind now.
	openAV, err := av.Open(av.Attr{}, nil, av.WithMirror(nil))
	require.NoError(t, err)
	require.NoError(t, ep.Bind(openAV, 0))
	require.ErrorIs(t, openAV.Close(), fi.EBUSY, "bound to the endpoint")
	q2, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, d.Bind(q2, fi.REG_MR))
	require.ErrorIs(t, q2.Close(), fi.EBUSY, "bound to the domain")

	require.NoError(t, ep.Close())
	require.ErrorIs(t, ep.Bind(openAV, 0), fi.EINVAL, "closed endpoint")
	require.NoError(t, openAV.Close())
	require.NoError(t, d.Close())
	require.NoError(t, q2.Close(), "the closed domain released its EQ")
	q3, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, d.Bind(q3, fi.REG_MR), fi.EINVAL, "closed domain")
	require.NoError(t, q3.Close(), "a refused bind keeps no reference")
}

// TestTryWaitClosedCQ: fi_trywait on a closed CQ is FI_EINVAL for every
// wait kind, also for a CQ that was in a wait set (which must not answer
// "safe to block" for a dead CQ).
func TestTryWaitClosedCQ(t *testing.T) {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Transport: fabric.TransportUDP}, nil)
	require.NoError(t, err)
	defer d.Close()
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	defer set.Close()
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield, fi.WaitSet} {
		attr := fabric.CQAttr{WaitObj: w}
		if w == fi.WaitSet {
			attr.WaitSet = set
		}
		cq, err := d.CQOpen(attr, nil)
		require.NoError(t, err, w)
		require.NoError(t, cq.Close(), w)
		require.ErrorIs(t, cq.TryWait(), fi.EINVAL, w)
	}
	require.NoError(t, set.TryWait(), "the closed CQ left the set")
}
