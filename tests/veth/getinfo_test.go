package veth

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestGetInfoXDPAttached: with xdpfab's XDP program attached on one veth
// end, GetInfo in that namespace lists the end's address first, with the
// program attached, and a domain opened from it uses AF_XDP and reports
// the same Info; in the other namespace the other end is listed without.
// Asked for the peer as node, GetInfo picks the local address by route.
func TestGetInfoXDPAttached(t *testing.T) {
	testenv.RequirePriv(t)
	nsA, nsB := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, nsA, nsB, testenv.VethOptions{})
	do(t, nsA, func() error {
		a, err := xdp.Attach(v.NameA, xdp.Options{Mode: xdp.ModeGeneric})
		if err != nil {
			return err
		}
		return a.Close() // the pinned link keeps it attached
	})
	t.Cleanup(func() { _ = nsA.Do(func() error { return xdp.Detach(v.NameA) }) })

	find := func(infos []*fabric.Info, addr netip.Addr) *fabric.Info {
		for _, info := range infos {
			if ap, ok := info.SrcAddrPort(); ok && ap.Addr() == addr {
				return info
			}
		}
		return nil
	}
	var infosA, infosB, toB []*fabric.Info
	do(t, nsA, func() error {
		var err error
		if infosA, err = fabric.GetInfo(fabric.APIVersion, "", "", 0, nil); err != nil {
			return err
		}
		toB, err = fabric.GetInfo(fabric.APIVersion, v.AddrB.Addr().String(), "7000", 0, nil)
		return err
	})
	do(t, nsB, func() error {
		var err error
		infosB, err = fabric.GetInfo(fabric.APIVersion, "", "", 0, nil)
		return err
	})

	a := find(infosA, v.AddrA.Addr())
	require.NotNil(t, a, "namespace A lists %v", v.AddrA)
	require.Same(t, a, infosA[0], "the XDP address comes first")
	require.True(t, a.NIC.XDPAttached)
	require.Equal(t, v.NameA, a.NIC.Name)
	require.Equal(t, v.NameA, a.DomainAttr.Name)
	require.Equal(t, v.AddrA.Masked().String(), a.FabricAttr.Name)
	require.Equal(t, fabric.CommCaps, a.Caps&fabric.CommCaps)
	require.Nil(t, find(infosA, v.AddrB.Addr()), "B's address is not A's")

	b := find(infosB, v.AddrB.Addr())
	require.NotNil(t, b, "namespace B lists %v", v.AddrB)
	require.False(t, b.NIC.XDPAttached)
	require.Equal(t, v.NameB, b.NIC.Name)
	require.Equal(t, a.FabricAttr.Name, b.FabricAttr.Name, "one network, one fabric name")

	require.Len(t, toB, 1)
	src, _ := toB[0].SrcAddrPort()
	dest, _ := toB[0].DestAddrPort()
	require.Equal(t, v.AddrA.Addr(), src.Addr(), "the route's source")
	require.Equal(t, netip.AddrPortFrom(v.AddrB.Addr(), 7000), dest)

	do(t, nsA, func() error {
		f, err := fabric.OpenFabricInfo(a.FabricAttr, nil)
		if err != nil {
			return err
		}
		d, err := f.DomainFromInfo(a, nil)
		if err != nil {
			return err
		}
		defer d.Close()
		require.Equal(t, fabric.TransportXDP, d.Transport(), "TransportAuto takes the attached program")
		require.Equal(t, a, d.Info(), "Domain.Info and GetInfo agree")
		ep, err := d.EndpointFromInfo(a, nil)
		if err != nil {
			return err
		}
		return ep.Close()
	})
	do(t, nsB, func() error {
		f, err := fabric.OpenFabricInfo(b.FabricAttr, nil)
		if err != nil {
			return err
		}
		d, err := f.DomainFromInfo(b, nil)
		if err != nil {
			return err
		}
		defer d.Close()
		require.Equal(t, fabric.TransportUDP, d.Transport())
		require.Equal(t, b, d.Info())
		_, err = fabric.GetInfo(fabric.APIVersion, v.AddrA.Addr().String(), "", fi.SOURCE, nil)
		require.ErrorIs(t, err, fi.ENODATA, "A's address is not local in B")
		return nil
	})
}
