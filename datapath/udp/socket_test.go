package udp

import (
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/datapath"
)

// testSharedPoll makes listen open sockets outside Go's netpoller
// (Options.SharedPoll); set only by TestSharedPollSocket, whose subtests
// do not run in parallel.
var testSharedPoll bool

// TestSharedPollSocket runs the transport's tests on sockets left out of
// Go's netpoller (Options.SharedPoll): batches both ways over IPv4 and
// IPv6, truncation, a waiting Receive woken by Close, bad arguments, no
// allocation once warm, ICMP port unreachable, GSO runs.
func TestSharedPollSocket(t *testing.T) {
	testSharedPoll = true
	defer func() { testSharedPoll = false }()
	t.Run("BatchRoundTrip", TestBatchRoundTrip)
	t.Run("TruncatedDropped", TestTruncatedDropped)
	t.Run("NonBlockingAndClose", TestNonBlockingAndClose)
	t.Run("BadArgs", TestBadArgs)
	t.Run("ZeroAllocs", TestZeroAllocs)
	t.Run("PortUnreachable", TestPortUnreachable)
	t.Run("DualStack", testDualStack)
}

// testDualStack: a socket on [::] reaches and hears IPv4 peers, as
// net.ListenUDP's "udp6" sockets do.
func testDualStack(t *testing.T) {
	a := listen(t, "[::]:0")
	b := listen(t, "127.0.0.1:0")
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), a.LocalAddr().Port())
	if err := b.Send([]datapath.Packet{{Buf: []byte("v4"), Addr: to}}); err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, a, 1)
	if string(got[0].Buf) != "v4" || got[0].Addr != b.LocalAddr() {
		t.Fatalf("got %q from %v, want from %v", got[0].Buf, got[0].Addr, b.LocalAddr())
	}
	if err := a.Send([]datapath.Packet{{Buf: []byte("back"), Addr: got[0].Addr}}); err != nil {
		t.Fatal(err)
	}
	if back := receiveAll(t, b, 1); string(back[0].Buf) != "back" {
		t.Fatalf("reply %q", back[0].Buf)
	}
}
