package xdp_test

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestPortAddrAndLocalAddrs checks the destination-address half of a port
// entry: a bound address round-trips through the ports map (IPv4 and IPv6,
// an unspecified address meaning every address), and Attach fills
// local_addrs with the namespace's addresses, which SyncLocalAddrs keeps
// exact.
func TestPortAddrAndLocalAddrs(t *testing.T) {
	p := newPair(t)
	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric, Ports: map[uint16]xdp.PortConfig{
		4791: {AVID: 1, Addr: p.v.AddrB.Addr()},
		4792: {AVID: 2, Addr: netip.MustParseAddr("fd00::2"), Strict: true},
		4793: {AVID: 3, Addr: netip.IPv4Unspecified()},
		4794: {AVID: 4},
	}})
	var dir string
	require.NoError(t, p.b.Do(func() error { dir = xdp.PinDir(p.v.NameB); return nil }))
	require.FileExists(t, filepath.Join(dir, bpf.XdpfabMapLocalAddrs))
	ports, err := a.Ports()
	require.NoError(t, err)
	require.Equal(t, []xdp.Port{
		{Port: 4791, PortConfig: xdp.PortConfig{AVID: 1, Addr: p.v.AddrB.Addr()}},
		{Port: 4792, PortConfig: xdp.PortConfig{AVID: 2, Addr: netip.MustParseAddr("fd00::2"), Strict: true}},
		{Port: 4793, PortConfig: xdp.PortConfig{AVID: 3}},
		{Port: 4794, PortConfig: xdp.PortConfig{AVID: 4}},
	}, ports)

	local := func() []netip.Addr {
		t.Helper()
		o, err := p.open(t)
		require.NoError(t, err)
		addrs, err := o.LocalAddrs()
		require.NoError(t, err)
		return addrs
	}
	// B holds 127.0.0.1, ::1 (lo) and its veth address (plus the veth's
	// IPv6 link-local address once the kernel assigns it).
	require.Subset(t, local(), []netip.Addr{p.v.AddrB.Addr(), netip.MustParseAddr("127.0.0.1")})
	require.NotContains(t, local(), p.v.AddrA.Addr())

	extra := netip.MustParsePrefix("10.251.0.1/32")
	out, err := p.b.Exec("ip", "addr", "add", extra.String(), "dev", p.v.NameB)
	require.NoError(t, err, out)
	require.NotContains(t, local(), extra.Addr(), "not synced yet")
	require.NoError(t, p.b.Do(func() error { return a.SyncLocalAddrs(nil) }))
	require.Contains(t, local(), extra.Addr())
	out, err = p.b.Exec("ip", "addr", "del", extra.String(), "dev", p.v.NameB)
	require.NoError(t, err, out)
	require.NoError(t, a.SyncLocalAddrs(p.b.Netlink()))
	require.NotContains(t, local(), extra.Addr())
	require.Contains(t, local(), p.v.AddrB.Addr())
}
