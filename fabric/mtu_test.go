package fabric

import (
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/fi"
)

func TestPacketSizeFromMTU(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mtu      int
		v6, xdp  bool
		frame    int // AF_XDP frame size (xdp), 4096 if 0
		want     int
		wantFail bool
	}{
		{name: "ipv4 1500", mtu: 1500, want: 1472},
		{name: "ipv6 1500", mtu: 1500, v6: true, want: 1452},
		{name: "ipv4 1500 xdp", mtu: 1500, xdp: true, want: 1472},
		{name: "ipv6 1500 xdp", mtu: 1500, v6: true, xdp: true, want: 1452},
		{name: "ipv4 1280", mtu: 1280, want: 1252},
		{name: "ipv6 1280", mtu: 1280, v6: true, want: 1232},
		// AF_XDP: a 4096-byte frame less 256 of headroom, Ethernet, IP, UDP.
		{name: "ipv4 9000 xdp", mtu: 9000, xdp: true, want: 4096 - 256 - 14 - 20 - 8},
		{name: "ipv6 9000 xdp", mtu: 9000, v6: true, xdp: true, want: 4096 - 256 - 14 - 40 - 8},
		{name: "ipv4 3000 xdp", mtu: 3000, xdp: true, want: 2972},
		// 2048-byte frames (an MTU raised after the device opened with
		// them): 2048 less 256 of headroom and headers.
		{name: "ipv4 1500 xdp 2048", mtu: 1500, xdp: true, frame: 2048, want: 1472},
		{name: "ipv4 3000 xdp 2048", mtu: 3000, xdp: true, frame: 2048, want: 2048 - 256 - 14 - 20 - 8},
		{name: "ipv6 3000 xdp 2048", mtu: 3000, v6: true, xdp: true, frame: 2048, want: 2048 - 256 - 14 - 40 - 8},
		// Kernel socket: a jumbo frame's payload at most.
		{name: "ipv4 9000", mtu: 9000, want: 8972},
		{name: "ipv4 loopback", mtu: 65536, want: 8972},
		{name: "ipv6 loopback", mtu: 65536, v6: true, want: 8952},
		{name: "ipv4 loopback xdp", mtu: 65536, xdp: true, want: 3798},
		// The engine's minimum, 256 bytes, and just below it.
		{name: "ipv4 284", mtu: 284, want: 256},
		{name: "ipv4 283", mtu: 283, wantFail: true},
		{name: "ipv6 303", mtu: 303, v6: true, wantFail: true},
		{name: "ipv4 68", mtu: 68, wantFail: true},
		{name: "zero", mtu: 0, wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frameData := largestFrameData(tc.xdp)
			if tc.frame != 0 {
				frameData = tc.frame - xsk.RxHeadroom
			}
			s, err := sizesFor(tc.mtu, tc.v6, frameData)
			if tc.wantFail {
				require.ErrorIs(t, err, fi.EINVAL)
				require.Contains(t, err.Error(), "MTU "+itoa(tc.mtu))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, s.maxPacket)
			require.LessOrEqual(t, s.maxPacket, wire.MaxPacketLen)
			require.Equal(t, tc.want-wire.HeaderLen-wire.OpDescLen, s.maxSegment)
			require.Equal(t, min(InjectSize, s.maxSegment), s.injectSize)
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestInterfaceMTU checks the lookup against the interfaces the process
// sees: the loopback address is lo's, an address inside lo's prefix too,
// and the unspecified address takes the smallest MTU of the up interfaces.
func TestInterfaceMTU(t *testing.T) {
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	var lo *net.Interface
	smallest := 0
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 && lo == nil {
			lo = &ifs[i]
		}
		if ifs[i].Flags&net.FlagUp != 0 && (smallest == 0 || ifs[i].MTU < smallest) {
			smallest = ifs[i].MTU
		}
	}
	if lo == nil {
		t.Skip("no loopback interface")
	}
	require.Equal(t, lo.MTU, interfaceMTU(netip.MustParseAddr("127.0.0.1")))
	require.Equal(t, lo.MTU, interfaceMTU(netip.MustParseAddr("127.0.0.2")), "inside lo's 127.0.0.0/8")
	require.Equal(t, lo.MTU, interfaceMTU(netip.MustParseAddr("::ffff:127.0.0.1")), "IPv4-mapped")
	require.Equal(t, smallest, interfaceMTU(netip.IPv4Unspecified()))
	require.Equal(t, smallest, interfaceMTU(netip.IPv6Unspecified()))
	require.Equal(t, smallest, interfaceMTU(netip.MustParseAddr("192.0.2.77")), "held by no interface")
	s, err := deriveSizes(netip.MustParseAddr("127.0.0.1"), 0)
	require.NoError(t, err)
	want, err := packetSize(lo.MTU, false, 0)
	require.NoError(t, err)
	require.Equal(t, want, s.maxPacket)
}

// TestEndpointSizesFollowMTU: on loopback the endpoint's packets, the
// atomic valid counts (before and after Enable), inject_size and the
// domain's Info all come from lo's MTU, capped for the kernel socket.
func TestEndpointSizesFollowMTU(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo interface")
	}
	f, err := OpenFabric("", nil)
	require.NoError(t, err)
	for _, a := range []string{"127.0.0.1", "::1"} {
		t.Run(a, func(t *testing.T) {
			addr := netip.MustParseAddr(a)
			want, err := sizesFor(lo.MTU, addr.Is6(), 0)
			require.NoError(t, err)
			d, err := f.Domain(DomainAttr{Addr: addr, Transport: TransportUDP}, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			info := d.Info()
			require.Equal(t, want.maxPacket, d.MaxPacket())
			require.Equal(t, lo.MTU, d.MTU())
			require.Equal(t, lo.MTU, info.NIC.MTU)
			require.Equal(t, want.maxSegment, d.MaxAtomicSize())
			require.Equal(t, want.injectSize, info.TxAttr.InjectSize)
			ep, err := d.Endpoint(EPAttr{}, nil)
			require.NoError(t, err)
			epOpen := true
			defer func() {
				if epOpen {
					_ = ep.Close()
				}
			}()
			require.Equal(t, want.maxPacket, ep.MaxPacket())
			require.Equal(t, want.injectSize, ep.InjectSize())
			before, err := ep.AtomicValid(fatomic.UINT8, fatomic.SUM)
			require.NoError(t, err)
			require.Equal(t, d.MaxAtomicSize(), before)
			v, err := av.Open(av.Attr{}, nil, av.WithMirror(nil))
			require.NoError(t, err)
			defer func() { require.NoError(t, v.Close()) }()
			cq, err := d.CQOpen(CQAttr{WaitObj: fi.WaitUnspec}, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, cq.Close()) }()
			require.NoError(t, ep.Bind(v, 0))
			require.NoError(t, ep.Bind(cq, fi.TRANSMIT|fi.RECV))
			require.NoError(t, ep.Enable())
			after, err := ep.AtomicValid(fatomic.UINT8, fatomic.SUM)
			require.NoError(t, err)
			require.Equal(t, before, after)
			require.Equal(t, want.maxSegment, ep.engine().MaxSegment())
			require.ErrorIs(t, ep.Inject(make([]byte, want.injectSize+1), 0), fi.EMSGSIZE)
			epOpen = false
			require.NoError(t, ep.Close())
		})
	}
}
