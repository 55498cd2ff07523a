package fabric

import (
	"fmt"
	"net"
	"net/netip"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// Packet size. An endpoint's datapath packets (UDP payloads) are as large
// as the path allows, by this rule:
//
//   - The MTU is that of the interface holding the domain's address (an
//     address inside an interface's prefix, such as 127.0.0.2 on lo,
//     counts as held by it; an IPv6 address with a zone uses the zone's
//     interface). For an unspecified (wildcard) address, or an address no
//     interface holds, it is the smallest MTU of the interfaces that are
//     up; 1500 when no MTU can be read.
//   - The payload is MTU − IP header (20 for IPv4, 40 for IPv6) − 8 (UDP).
//   - It is capped at what the transport carries: for AF_XDP, one UMEM
//     frame less the kernel's 256-byte receive headroom and the Ethernet,
//     IP and UDP headers (3798 bytes over IPv4, 3778 over IPv6 with
//     4096-byte frames; datapath/afxdp uses 2048-byte frames on interfaces
//     whose MTU fits them, chosen when its first endpoint there opens, so
//     an endpoint opened after the MTU was raised past 1774 gets at most
//     1750 / 1730 until every endpoint on the interface closed);
//     for the kernel UDP socket (and any other transport), a 9000-byte
//     jumbo frame's payload (8972 / 8952). The socket could carry up to
//     wire.MaxPacketLen, but the engine keeps Window packets in flight and
//     cached per peer and a receive batch of full-size buffers, so
//     loopback's 65536-byte MTU would cost megabytes per peer and overrun
//     the socket buffer with one window; 9000 bytes keeps a full window
//     inside it.
//   - Below 256 bytes (the engine's minimum) endpoint creation fails with
//     FI_EINVAL naming the MTU.
//
// Everything sized by one packet follows: the atomic operand bytes per
// request (max_atomic_size, the fi_atomicvalid counts), inject_size
// (InjectSize at most), and how the engine cuts messages and RMA transfers
// into segments. Peers should share the MTU (as on one link): a packet
// larger than the receiver's own limit is dropped there and retried until
// the operation times out. The MTU is read when the domain opens (for Info)
// and again when each endpoint opens; later changes do not apply to open
// endpoints.

const (
	minPacket = 256 // reliable.Config's smallest MaxPacket

	defaultMTU = 1500 // when no MTU can be read

	// jumboMTU bounds the kernel UDP socket's packets (see above).
	jumboMTU = 9000
)

// packetSize returns the UDP payload limit for an interface MTU, an
// address family and a transport, by the rule above: frameData is the most
// bytes of Ethernet frame an AF_XDP receive frame holds
// (afxdp.Transport.FrameData), 0 for the kernel UDP socket.
func packetSize(mtu int, v6 bool, frameData int) (int, error) {
	ipHdr := udpframe.IPv4Len
	if v6 {
		ipHdr = udpframe.IPv6Len
	}
	n := mtu - ipHdr - udpframe.UDPLen
	limit := jumboMTU - ipHdr - udpframe.UDPLen
	if frameData > 0 {
		limit = frameData - udpframe.EthLen - ipHdr - udpframe.UDPLen
	}
	n = min(n, limit, wire.MaxPacketLen)
	if n < minPacket {
		return 0, fmt.Errorf("interface MTU %d leaves %d bytes of UDP payload, below the %d the datapath needs: %w",
			mtu, max(n, 0), minPacket, fi.EINVAL)
	}
	return n, nil
}

// is6 reports whether addr is sent over IPv6.
func is6(addr netip.Addr) bool { return addr.Is6() && !addr.Is4In6() }

// interfaceMTU returns the MTU that applies to addr, by the rule above,
// in the calling thread's network namespace.
func interfaceMTU(addr netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil || len(ifs) == 0 {
		return defaultMTU
	}
	addr = addr.Unmap()
	if addr.IsValid() && !addr.IsUnspecified() {
		if z := addr.Zone(); z != "" {
			for _, ifc := range ifs {
				if ifc.Name == z && ifc.MTU > 0 {
					return ifc.MTU
				}
			}
		}
		bare := addr.WithZone("")
		inPrefix := 0
		for _, ifc := range ifs {
			addrs, err := ifc.Addrs()
			if err != nil || ifc.MTU <= 0 {
				continue
			}
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				ip, ok := netip.AddrFromSlice(ipn.IP)
				if !ok {
					continue
				}
				if ip.Unmap() == bare {
					return ifc.MTU
				}
				ones, _ := ipn.Mask.Size()
				if p, err := ip.Unmap().Prefix(ones); err == nil && p.Contains(bare) && inPrefix == 0 {
					inPrefix = ifc.MTU
				}
			}
		}
		if inPrefix > 0 {
			return inPrefix
		}
	}
	smallest := 0
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp != 0 && ifc.MTU > 0 && (smallest == 0 || ifc.MTU < smallest) {
			smallest = ifc.MTU
		}
	}
	if smallest == 0 {
		return defaultMTU
	}
	return smallest
}

// isXDP reports whether tr is (or wraps) an AF_XDP transport.
func isXDP(tr datapath.Transport) bool { return xdpOf(tr) != nil }

// frameDataOf is packetSize's frameData for tr: its AF_XDP frames' data
// bytes, 0 if tr is not AF_XDP.
func frameDataOf(tr datapath.Transport) int {
	if x := xdpOf(tr); x != nil {
		return x.FrameData()
	}
	return 0
}

// xdpOf returns the AF_XDP transport tr is or wraps, nil if none.
func xdpOf(tr datapath.Transport) *afxdp.Transport {
	for {
		if x, ok := tr.(*afxdp.Transport); ok {
			return x
		}
		u, ok := tr.(interface{ Unwrap() datapath.Transport })
		if !ok {
			return nil
		}
		tr = u.Unwrap()
	}
}

// largestFrameData is packetSize's frameData for an interface with xdpfab
// attached (xdp) before a transport opened on it (fi_getinfo, a domain's
// sizes): what the largest frames hold, so that the MTU decides.
func largestFrameData(xdp bool) int {
	if xdp {
		return afxdp.MaxFrameData
	}
	return 0
}

// sizes are the limits that follow from one packet size.
type sizes struct {
	mtu        int // the MTU they were derived from
	maxPacket  int // UDP payload bytes per packet (reliable.Config.MaxPacket)
	maxSegment int // operand or data bytes one request packet carries
	injectSize int // inject_size: InjectSize at most, and one packet
}

// atomics is the atomic engine for these sizes: one request packet's
// operand bytes bound the valid counts (endpoints and fi_query_atomic).
func (s sizes) atomics() fatomic.Engine { return fatomic.Engine{MaxPayload: s.maxSegment} }

// deriveSizes reads the MTU for addr and derives the sizes for it
// (frameData as for packetSize).
func deriveSizes(addr netip.Addr, frameData int) (sizes, error) {
	mtu := interfaceMTU(addr)
	return sizesFor(mtu, is6(addr), frameData)
}

func sizesFor(mtu int, v6 bool, frameData int) (sizes, error) {
	n, err := packetSize(mtu, v6, frameData)
	if err != nil {
		return sizes{mtu: mtu}, err
	}
	seg := n - wire.HeaderLen - wire.OpDescLen
	return sizes{mtu: mtu, maxPacket: n, maxSegment: seg, injectSize: min(InjectSize, seg)}, nil
}
