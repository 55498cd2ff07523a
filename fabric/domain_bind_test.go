package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// TestBindAcrossDomains: an endpoint binds only CQs and counters of its
// own domain, and a region only counters and endpoints of its own; the
// same objects bind within one domain.
func TestBindAcrossDomains(t *testing.T) {
	d1, d2 := openDomain(t), openDomain(t)
	ep, err := d1.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ep.Close() })
	cq1, err := d1.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cq1.Close() })
	cq2, err := d2.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cq2.Close() })
	c1, err := d1.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { c1.Close() })
	c2, err := d2.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { c2.Close() })
	mr2, err := d2.MRReg(make([]byte, 64), fi.REMOTE_WRITE, 0, 7, 0, nil)
	require.NoError(t, err)
	t.Cleanup(func() { mr2.Close() })

	require.ErrorIs(t, ep.Bind(cq2, fi.TRANSMIT), fi.EINVAL, "CQ of another domain")
	require.ErrorIs(t, ep.Bind(c2, fi.SEND), fi.EINVAL, "counter of another domain")
	require.ErrorIs(t, mr2.Bind(c1, fi.REMOTE_WRITE), fi.EINVAL, "region and counter of different domains")
	require.ErrorIs(t, mr2.Bind(ep, 0), fi.EINVAL, "region and endpoint of different domains")

	require.NoError(t, ep.Bind(cq1, fi.TRANSMIT))
	require.NoError(t, ep.Bind(c1, fi.SEND))
	require.NoError(t, mr2.Bind(c2, fi.REMOTE_WRITE))
	require.NoError(t, ep.Close())
	require.NoError(t, c2.Close()) // a region closes after its bound counters
	require.NoError(t, mr2.Close())
}
