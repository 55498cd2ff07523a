package veth

import (
	"testing"

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
}

// transportCases are the transports under test.
var transportCases = []transportCase{
	{name: "udp", setup: func(testing.TB, *testNet) fabric.DomainAttr {
		return fabric.DomainAttr{Transport: fabric.TransportUDP}
	}},
	// ---- AF_XDP cases go here, once fabric.TransportXDP opens AF_XDP sockets:
	// {name: "xdp-native", setup: xdpSetup(xdp.ModeNative), kernelFilters: true},
	// {name: "xdp-generic", setup: xdpSetup(xdp.ModeGeneric), kernelFilters: true},
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
