package fabric_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// freeUDPPort returns a loopback UDP port that was free a moment ago.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	port := c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	require.NoError(t, c.Close())
	return port
}

// TestSetAddrMovesEndpoint: fi_setname before enable moves the endpoint to
// the port asked for; GetName reports it, traffic to it arrives, and the
// port the endpoint had is released.
func TestSetAddrMovesEndpoint(t *testing.T) {
	a := newSide(t, sideOpts{noEnable: true})
	b := newSide(t, sideOpts{})
	before := a.ep.LocalAddr()
	port := freeUDPPort(t)
	require.NoError(t, a.ep.SetAddr(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)))
	require.Equal(t, port, a.ep.LocalAddr().Port())
	require.Equal(t, before.Addr(), a.ep.LocalAddr().Addr())
	// An unspecified IP keeps the endpoint's; port 0 keeps its port.
	port2 := freeUDPPort(t)
	require.NoError(t, a.ep.SetAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port2)))
	require.Equal(t, port2, a.ep.LocalAddr().Port())
	require.NoError(t, a.ep.SetAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)))
	require.Equal(t, port2, a.ep.LocalAddr().Port())

	// The ports it left are free again.
	for _, p := range []uint16{before.Port(), port} {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(before.Addr(), p)))
		require.NoError(t, err, "port %d still taken", p)
		require.NoError(t, c.Close())
	}

	require.NoError(t, a.ep.Enable())
	link(t, a, b)
	buf := make([]byte, 16)
	require.NoError(t, a.ep.Recv(buf, a.region.Desc(), fi.AddrUnspec, "recv"))
	require.NoError(t, b.ep.Send([]byte("moved"), b.region.Desc(), b.peer, "send"))
	require.Equal(t, "send", comp(t, b.txCQ).Context)
	e, src := compFrom(t, a.rxCQ)
	require.Equal(t, "recv", e.Context)
	require.Equal(t, a.peer, src)
	require.Equal(t, "moved", string(buf[:5]))
}

// TestSetAddrBadInput: every refusal leaves the endpoint where it was.
func TestSetAddrBadInput(t *testing.T) {
	a := newSide(t, sideOpts{noEnable: true})
	here := a.ep.LocalAddr()
	taken, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer taken.Close()
	for _, tc := range []struct {
		name string
		addr netip.AddrPort
		want error
	}{
		{"no address", netip.AddrPort{}, fi.EINVAL},
		{"another IP", netip.MustParseAddrPort("127.0.0.2:4000"), fi.EADDRNOTAVAIL},
		{"another family", netip.MustParseAddrPort("[::1]:4000"), fi.EADDRNOTAVAIL},
		{"port in use", taken.LocalAddr().(*net.UDPAddr).AddrPort(), fi.EADDRINUSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, a.ep.SetAddr(tc.addr), tc.want)
			require.Equal(t, here, a.ep.LocalAddr())
		})
	}
	require.NoError(t, a.ep.Enable())
	require.ErrorIs(t, a.ep.SetAddr(netip.AddrPortFrom(here.Addr(), freeUDPPort(t))), fi.EOPBADSTATE)
	require.Equal(t, here, a.ep.LocalAddr())
	require.NoError(t, a.ep.Close())
	require.ErrorIs(t, a.ep.SetAddr(here), fi.EINVAL)

	// An endpoint on an injected transport cannot move it.
	d := openDomain(t)
	tr, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	require.NoError(t, err)
	ep, err := d.Endpoint(fabric.EPAttr{Transport: tr}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, ep.SetAddr(netip.AddrPortFrom(here.Addr(), freeUDPPort(t))), fi.EOPNOTSUPP)
	require.NoError(t, ep.Close())
	_ = tr.Close() // the endpoint may have closed it already
}
