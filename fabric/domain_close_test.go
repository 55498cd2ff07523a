package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// TestDomainCloseWhileQueuesOpen: fi_domain(3) says every object opened on
// a domain must be closed before the domain, or fi_close fails with
// FI_EBUSY. A CQ, a counter and a poll set each keep the domain open until
// they close; a failed open (bad attributes) holds nothing; once the domain
// closed, opening any of them fails with FI_EINVAL.
func TestDomainCloseWhileQueuesOpen(t *testing.T) {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Transport: fabric.TransportUDP}, nil)
	require.NoError(t, err)

	_, err = d.CQOpen(fabric.CQAttr{Size: -1}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = d.CntrOpen(fabric.CntrAttr{Flags: 1}, nil)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	_, err = d.PollOpen(fabric.PollAttr{Flags: 1})
	require.ErrorIs(t, err, fi.EBADFLAGS)

	cq, err := d.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	cntr, err := d.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	ps, err := d.PollOpen(fabric.PollAttr{})
	require.NoError(t, err)

	require.ErrorIs(t, d.Close(), fi.EBUSY, "CQ, counter and poll set open")
	require.NoError(t, cq.Close())
	require.ErrorIs(t, d.Close(), fi.EBUSY, "counter and poll set open")
	require.NoError(t, cntr.Close())
	require.ErrorIs(t, cntr.Close(), fi.EINVAL, "a second close releases nothing")
	require.ErrorIs(t, d.Close(), fi.EBUSY, "poll set open")
	require.NoError(t, ps.Close())
	require.NoError(t, d.Close())

	_, err = d.CQOpen(fabric.CQAttr{}, nil)
	require.ErrorIs(t, err, fi.EINVAL, "closed domain")
	_, err = d.CntrOpen(fabric.CntrAttr{}, nil)
	require.ErrorIs(t, err, fi.EINVAL, "closed domain")
	_, err = d.PollOpen(fabric.PollAttr{})
	require.ErrorIs(t, err, fi.EINVAL, "closed domain")
}
