package bpf

import (
	"encoding/binary"
	"net/netip"
)

// frame describes a test packet; build turns it into bytes. Zero fields
// take the defaults of a well-formed IPv4 UDP datagram.
type frame struct {
	vlan       bool   // one 802.1Q tag
	etherType  uint16 // overrides the L3 ethertype (e.g. ARP)
	src, dst   netip.AddrPort
	proto      uint8   // IP protocol, default UDP
	csum       *uint16 // overrides the UDP checksum (default: the right one)
	ipOptions  int     // IPv4 option bytes (multiple of 4)
	fragOff    uint16  // IPv4 flags+fragment offset field (host order)
	v6Frag     bool    // IPv6: a fragment header before UDP
	payload    []byte  // UDP payload (or L4 bytes when proto is not UDP)
	udpLen     int     // overrides the UDP length field when nonzero
	ipLen      int     // overrides the IPv4 total / IPv6 payload length when nonzero
	ihl        int     // overrides the IPv4 IHL field when nonzero
	badVersion bool    // IPv4 header claiming version 6
}

var (
	macA = []byte{0x02, 0, 0, 0, 0, 0xa}
	macB = []byte{0x02, 0, 0, 0, 0, 0xb}
)

func (f frame) build() []byte {
	var b []byte
	b = append(b, macB...)
	b = append(b, macA...)
	if f.vlan {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, 42) // VLAN id 42
	}
	v6 := f.src.Addr().Is6() && !f.src.Addr().Is4In6()
	switch {
	case f.etherType != 0:
		b = binary.BigEndian.AppendUint16(b, f.etherType)
		return append(b, f.payload...)
	case v6:
		b = binary.BigEndian.AppendUint16(b, 0x86dd)
	default:
		b = binary.BigEndian.AppendUint16(b, 0x0800)
	}

	proto := f.proto
	if proto == 0 {
		proto = 17
	}
	l4 := f.payload
	if proto == 17 {
		udp := make([]byte, 8, 8+len(f.payload))
		binary.BigEndian.PutUint16(udp[0:], f.src.Port())
		binary.BigEndian.PutUint16(udp[2:], f.dst.Port())
		ul := 8 + len(f.payload)
		if f.udpLen != 0 {
			ul = f.udpLen
		}
		binary.BigEndian.PutUint16(udp[4:], uint16(ul))
		l4 = append(udp, f.payload...)
		c := udpChecksum(f.src.Addr(), f.dst.Addr(), l4)
		if f.csum != nil {
			c = *f.csum
		}
		binary.BigEndian.PutUint16(l4[6:], c)
	}

	if v6 {
		next := proto
		if f.v6Frag {
			fh := []byte{proto, 0, 0, 0, 0, 0, 0, 1}
			l4 = append(fh, l4...)
			next = 44
		}
		ip := make([]byte, 40)
		ip[0] = 0x60
		pl := len(l4)
		if f.ipLen != 0 {
			pl = f.ipLen
		}
		binary.BigEndian.PutUint16(ip[4:], uint16(pl))
		ip[6] = next
		ip[7] = 64
		s, d := f.src.Addr().As16(), f.dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = append(b, ip...)
		return append(b, l4...)
	}

	hl := 20 + f.ipOptions
	ip := make([]byte, hl)
	ihl := hl / 4
	if f.ihl != 0 {
		ihl = f.ihl
	}
	ip[0] = 0x40 | byte(ihl)
	if f.badVersion {
		ip[0] = 0x60 | byte(ihl)
	}
	tot := hl + len(l4)
	if f.ipLen != 0 {
		tot = f.ipLen
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(tot))
	binary.BigEndian.PutUint16(ip[6:], f.fragOff)
	ip[8] = 64
	ip[9] = proto
	for i := 20; i < hl; i++ {
		ip[i] = 1 // NOP options
	}
	s, d := f.src.Addr().Unmap().As4(), f.dst.Addr().Unmap().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	b = append(b, ip...)
	return append(b, l4...)
}

// udpChecksum is RFC 768's checksum of the UDP datagram l4 (its checksum
// field zero) between src and dst, computed the plain way. A datagram
// whose length field lies is summed over the bytes it has.
func udpChecksum(src, dst netip.Addr, l4 []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	if src.Unmap().Is4() {
		s, d := src.Unmap().As4(), dst.Unmap().As4()
		add(s[:])
		add(d[:])
	} else {
		s, d := src.As16(), dst.As16()
		add(s[:])
		add(d[:])
	}
	sum += 17 + uint32(len(l4))
	add(l4)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if c := ^uint16(sum); c != 0 {
		return c
	}
	return 0xffff
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Wire-format test payloads: the program does not read them (only the
// checksum covers them), but test packets carry realistic ones.

type wireOp struct {
	opcode, access, datatype uint8
	atomicOp                 uint8 // enum fi_op
	len, respLen             uint32
	rkey, addr               uint64
	count                    uint32
}

// request encodes a request with ops, with payload bytes matching each
// op's len.
func request(ops ...wireOp) []byte {
	b := make([]byte, 40)
	b[0], b[1], b[2] = 0xFB, 1, 1 // magic, version, REQ
	binary.LittleEndian.PutUint16(b[4:], uint16(len(ops)))
	for _, op := range ops {
		d := make([]byte, 48)
		d[0], d[1], d[2], d[3] = op.opcode, op.access, op.datatype, op.atomicOp
		binary.LittleEndian.PutUint32(d[8:], op.len)
		binary.LittleEndian.PutUint32(d[12:], op.respLen)
		binary.LittleEndian.PutUint64(d[16:], op.rkey)
		binary.LittleEndian.PutUint64(d[24:], op.addr)
		binary.LittleEndian.PutUint32(d[40:], op.count)
		b = append(b, d...)
	}
	for _, op := range ops {
		b = append(b, make([]byte, op.len)...)
	}
	return b
}

func msgOp(n uint32) wireOp { return wireOp{opcode: 1, len: n, count: n} }
