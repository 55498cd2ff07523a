package veth

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/xdp"
)

// transportCase is one way of moving packets between the namespaces. Every
// test and benchmark runs once per case.
type transportCase struct {
	name string
	// setup prepares the namespaces of net (whose veth pair exists and
	// whose endpoint ports, net.ports, are fixed, but whose endpoints are
	// not open yet) and returns the DomainAttr the nodes open their
	// domains with; newNet fills in Addr and Port per node. Anything it
	// sets up it removes with t.Cleanup.
	setup func(t testing.TB, net *testNet) fabric.DomainAttr
	// kernelFilters says the transport's XDP program drops packets that
	// are not xdpfab's, malformed or from peers outside the AV before the
	// endpoint sees them, so those drops need not show in its Stats.
	kernelFilters bool
	// netfilterSees says nftables rules see the endpoints' traffic (the
	// kernel socket path); AF_XDP traffic bypasses netfilter, so real-path
	// loss injection with nftables applies to it only where this is set.
	netfilterSees bool
	// blackhole makes the target side (B) silently drop everything sent
	// to port until the returned function is called.
	blackhole func(t testing.TB, net *testNet, port uint16) (lift func())
}

// transportCases are the transports under test.
var transportCases = []transportCase{
	{name: "udp", setup: func(testing.TB, *testNet) fabric.DomainAttr {
		return fabric.DomainAttr{Transport: fabric.TransportUDP}
	}, netfilterSees: true, blackhole: nftBlackhole},
	{name: "xdp-native", setup: xdpSetup(xdp.ModeNative), kernelFilters: true, blackhole: xdpBlackhole},
	{name: "xdp-generic", setup: xdpSetup(xdp.ModeGeneric), kernelFilters: true, blackhole: xdpBlackhole},
}

// nftBlackhole drops what enters B's namespace for port with an nftables
// rule (at the receiver: see nftImpair for why not at the sender).
func nftBlackhole(t testing.TB, net *testNet, port uint16) func() {
	ns := net.ns[sideB]
	for _, args := range [][]string{
		{"add", "table", "inet", "xftbh"},
		{"add", "chain", "inet", "xftbh", "in", "{ type filter hook input priority 0; }"},
		{"add", "rule", "inet", "xftbh", "in", "udp", "dport", fmt.Sprint(port), "drop"},
	} {
		out, err := ns.Exec("nft", args...)
		require.NoError(t, err, "nft %v: %s", args, out)
	}
	return func() {
		out, err := ns.Exec("nft", "delete", "table", "inet", "xftbh")
		require.NoError(t, err, "%s", out)
	}
}

// xdpBlackhole makes B's XDP program drop what arrives for port: the port
// is pointed, strict, at an AV id no AV has, so every sender is an unknown
// peer dropped in XDP (netfilter never sees AF_XDP traffic).
func xdpBlackhole(t testing.TB, net *testNet, port uint16) func() {
	iface, ns := net.iface(sideB), net.ns[sideB]
	var saved xdp.PortConfig
	do(t, ns, func() error {
		a, err := xdp.Open(iface)
		if err != nil {
			return err
		}
		defer a.Close()
		ports, err := a.Ports()
		if err != nil {
			return err
		}
		for _, p := range ports {
			if p.Port == port {
				saved = p.PortConfig
			}
		}
		return a.SetPort(port, xdp.PortConfig{AVID: 0xFFFFFFF0, DomainID: saved.DomainID, Strict: true})
	})
	return func() {
		do(t, ns, func() error {
			a, err := xdp.Open(iface)
			if err != nil {
				return err
			}
			defer a.Close()
			return a.SetPort(port, saved)
		})
	}
}

// xdpSetup returns the setup of an AF_XDP case: it attaches xdpfab's XDP
// program in mode on both veth ends, inside their namespaces, handling the
// UDP ports the endpoints will use, and detaches it when the test ends.
func xdpSetup(mode xdp.Mode) func(testing.TB, *testNet) fabric.DomainAttr {
	return func(t testing.TB, net *testNet) fabric.DomainAttr {
		for _, s := range sides {
			ports := map[uint16]xdp.PortConfig{}
			for _, p := range net.ports[s] {
				ports[p] = xdp.PortConfig{}
			}
			iface, ns := net.iface(s), net.ns[s]
			do(t, ns, func() error {
				a, err := xdp.Attach(iface, xdp.Options{Mode: mode, Ports: ports})
				if err != nil {
					return err
				}
				return a.Close() // the pinned link keeps the program attached
			})
			t.Cleanup(func() { _ = ns.Do(func() error { return xdp.Detach(iface) }) })
		}
		return fabric.DomainAttr{Transport: fabric.TransportXDP}
	}
}

// forEachTransport runs fn as a subtest per transport case.
func forEachTransport(t *testing.T, fn func(t *testing.T, tc transportCase)) {
	t.Helper()
	for _, tc := range transportCases {
		t.Run(tc.name, func(t *testing.T) { fn(t, tc) })
	}
}
