// Package udpframe builds and parses the Ethernet + IPv4/IPv6 + UDP
// encapsulation the AF_XDP transport writes and reads itself (the kernel
// stack is bypassed, so nobody else does it).
//
// Build writes the headers in place in front of a payload the caller has
// already put at the right offset (HeaderLen), so transmit copies the
// payload once. The IPv4 header checksum is always computed; the UDP
// checksum is computed for IPv6 (mandatory there) and, for IPv4, only when
// Options.UDPChecksum is set (zero is allowed for IPv4 and saves a pass over
// the payload). Parse accepts one 802.1Q tag, skips IPv4 options, and
// rejects fragments and anything truncated.
package udpframe

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
)

// Header sizes.
const (
	EthLen  = 14
	VLANLen = 4
	IPv4Len = 20
	IPv6Len = 40
	UDPLen  = 8
)

// Endpoints addresses one UDP flow at link level.
type Endpoints struct {
	SrcMAC, DstMAC net.HardwareAddr
	Src, Dst       netip.AddrPort
	UDPChecksum    bool // compute the UDP checksum for IPv4 too
}

// HeaderLen is the number of header bytes Build writes before the payload.
func (e *Endpoints) HeaderLen() int {
	if e.Src.Addr().Is4() {
		return EthLen + IPv4Len + UDPLen
	}
	return EthLen + IPv6Len + UDPLen
}

// ErrFrame reports a frame that is not a well-formed, unfragmented UDP
// datagram over Ethernet.
var ErrFrame = errors.New("udpframe: not a well-formed UDP frame")

// Build writes the Ethernet, IP and UDP headers into frame[:HeaderLen()],
// for a payload already at frame[HeaderLen():HeaderLen()+payloadLen]. It
// returns the total frame length.
func Build(frame []byte, e *Endpoints, payloadLen int) (int, error) {
	hl := e.HeaderLen()
	total := hl + payloadLen
	if len(frame) < total || len(e.SrcMAC) != 6 || len(e.DstMAC) != 6 {
		return 0, ErrFrame
	}
	v4 := e.Src.Addr().Is4()
	if v4 != e.Dst.Addr().Is4() {
		return 0, ErrFrame
	}
	copy(frame[0:6], e.DstMAC)
	copy(frame[6:12], e.SrcMAC)
	udpOff := 0
	if v4 {
		binary.BigEndian.PutUint16(frame[12:], 0x0800)
		ip := frame[EthLen : EthLen+IPv4Len]
		ip[0] = 0x45
		ip[1] = 0
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4Len+UDPLen+payloadLen))
		binary.BigEndian.PutUint16(ip[4:], 0) // id: unused with DF
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		ip[8] = 64
		ip[9] = 17
		ip[10], ip[11] = 0, 0
		s, d := e.Src.Addr().As4(), e.Dst.Addr().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip, 0)))
		udpOff = EthLen + IPv4Len
	} else {
		binary.BigEndian.PutUint16(frame[12:], 0x86DD)
		ip := frame[EthLen : EthLen+IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(UDPLen+payloadLen))
		ip[6] = 17
		ip[7] = 64
		s, d := e.Src.Addr().As16(), e.Dst.Addr().As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		udpOff = EthLen + IPv6Len
	}
	udp := frame[udpOff : udpOff+UDPLen+payloadLen]
	binary.BigEndian.PutUint16(udp[0:], e.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], e.Dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(UDPLen+payloadLen))
	udp[6], udp[7] = 0, 0
	if !v4 || e.UDPChecksum {
		c := ^fold(sum(udp, pseudoSum(frame, udpOff, v4, len(udp))))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(udp[6:], c)
	}
	return total, nil
}

func pseudoSum(frame []byte, udpOff int, v4 bool, udpLen int) uint32 {
	var s uint32
	if v4 {
		s = sum(frame[EthLen+12:EthLen+20], 0)
	} else {
		s = sum(frame[EthLen+8:EthLen+40], 0)
	}
	return s + 17 + uint32(udpLen)
}

// sum adds b as big-endian 16-bit words to s (one's-complement partial sum).
func sum(b []byte, s uint32) uint32 {
	n := len(b) &^ 1
	for i := 0; i < n; i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)&1 != 0 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Parsed describes a received UDP frame.
type Parsed struct {
	Src, Dst      netip.AddrPort
	PayloadOffset int
	PayloadLen    int
}

// Parse decodes frame's Ethernet (optionally 802.1Q-tagged), IPv4 or IPv6
// and UDP headers. It rejects fragments, IPv6 extension headers and
// anything whose lengths do not fit.
func Parse(frame []byte, p *Parsed) error {
	if len(frame) < EthLen {
		return ErrFrame
	}
	off := 12
	et := binary.BigEndian.Uint16(frame[off:])
	off += 2
	if et == 0x8100 {
		if len(frame) < off+VLANLen {
			return ErrFrame
		}
		et = binary.BigEndian.Uint16(frame[off+2:])
		off += VLANLen
	}
	var udpOff, ipEnd int
	switch et {
	case 0x0800:
		if len(frame) < off+IPv4Len || frame[off]>>4 != 4 {
			return ErrFrame
		}
		ihl := int(frame[off]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(frame[off+2:]))
		if ihl < IPv4Len || len(frame) < off+tot || tot < ihl+UDPLen || frame[off+9] != 17 {
			return ErrFrame
		}
		if binary.BigEndian.Uint16(frame[off+6:])&0x3fff != 0 { // MF or fragment offset
			return ErrFrame
		}
		s, _ := netip.AddrFromSlice(frame[off+12 : off+16])
		d, _ := netip.AddrFromSlice(frame[off+16 : off+20])
		udpOff, ipEnd = off+ihl, off+tot
		p.Src = netip.AddrPortFrom(s, binary.BigEndian.Uint16(frame[udpOff:]))
		p.Dst = netip.AddrPortFrom(d, binary.BigEndian.Uint16(frame[udpOff+2:]))
	case 0x86DD:
		if len(frame) < off+IPv6Len || frame[off]>>4 != 6 || frame[off+6] != 17 {
			return ErrFrame
		}
		pl := int(binary.BigEndian.Uint16(frame[off+4:]))
		udpOff, ipEnd = off+IPv6Len, off+IPv6Len+pl
		if len(frame) < ipEnd || pl < UDPLen {
			return ErrFrame
		}
		s, _ := netip.AddrFromSlice(frame[off+8 : off+24])
		d, _ := netip.AddrFromSlice(frame[off+24 : off+40])
		p.Src = netip.AddrPortFrom(s, binary.BigEndian.Uint16(frame[udpOff:]))
		p.Dst = netip.AddrPortFrom(d, binary.BigEndian.Uint16(frame[udpOff+2:]))
	default:
		return ErrFrame
	}
	ul := int(binary.BigEndian.Uint16(frame[udpOff+4:]))
	if ul < UDPLen || udpOff+ul > ipEnd {
		return ErrFrame
	}
	p.PayloadOffset = udpOff + UDPLen
	p.PayloadLen = ul - UDPLen
	return nil
}
