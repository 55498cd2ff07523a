package nexthop_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/nexthop"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestResolveOverVeth resolves the peer of a fresh veth pair, whose
// neighbour table starts empty, so the probe path runs.
func TestResolveOverVeth(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{MTU: 3000})
	lb, err := b.Netlink().LinkByName(v.NameB)
	require.NoError(t, err)
	la, err := a.Netlink().LinkByName(v.NameA)
	require.NoError(t, err)

	var hop nexthop.Hop
	require.NoError(t, a.Do(func() error {
		r := nexthop.New(a.Netlink(), 2*time.Second)
		var err error
		hop, err = r.Lookup(v.AddrB.Addr())
		return err
	}))
	require.Equal(t, v.IndexA, hop.Ifindex)
	require.Equal(t, v.AddrA.Addr(), hop.Src)
	require.Equal(t, la.Attrs().HardwareAddr, hop.SrcMAC)
	require.Equal(t, lb.Attrs().HardwareAddr, hop.DstMAC)
	require.Equal(t, 3000, hop.MTU)

	// An address with no host behind it never resolves: a bounded error.
	require.NoError(t, a.Do(func() error {
		r := nexthop.New(a.Netlink(), 200*time.Millisecond)
		_, err := r.Lookup(v.AddrB.Addr().Next())
		require.ErrorIs(t, err, nexthop.ErrUnresolved)
		return nil
	}))
}
