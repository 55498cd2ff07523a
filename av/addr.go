package av

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/fi"
)

// Sizes of the binary address formats (struct sockaddr_in / sockaddr_in6).
const (
	SockaddrInLen  = 16
	SockaddrIn6Len = 28
)

// Linux address families, as stored (host order) in sa_family.
const (
	afInet  = 2
	afInet6 = 10
)

// FI_ADDR_STR prefixes (fi_getinfo(3)).
const (
	strPrefix4 = "fi_sockaddr_in://"
	strPrefix6 = "fi_sockaddr_in6://"
)

// endpoint is the AV's internal form of a peer: an IPv6 address (IPv4
// stored IPv4-mapped, as in struct av_key) and the UDP port in host order.
type endpoint struct {
	ip   [16]byte
	port uint16
}

// v4Prefix is the ::ffff:0:0/96 prefix of IPv4-mapped addresses.
var v4Prefix = [12]byte{10: 0xff, 11: 0xff}

func (e endpoint) is4() bool { return [12]byte(e.ip[:12]) == v4Prefix }

// addrPort returns e as a netip.AddrPort, IPv4 unmapped.
func (e endpoint) addrPort() netip.AddrPort {
	a := netip.AddrFrom16(e.ip)
	if e.is4() {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, e.port)
}

// endpointOf converts and validates ap: a valid, specified address and a
// non-zero port. The IPv6 zone is dropped: the kernel map key has none.
func endpointOf(ap netip.AddrPort) (endpoint, fi.Errno) {
	a := ap.Addr()
	if !a.IsValid() || a.Unmap().IsUnspecified() || ap.Port() == 0 {
		return endpoint{}, fi.EINVAL
	}
	return endpoint{ip: a.As16(), port: ap.Port()}, 0
}

// parseAddr parses one address in format f, the AV's address format.
func parseAddr(f fi.AddrFormat, b []byte) (endpoint, fi.Errno) {
	switch f {
	case fi.FormatSockaddr4:
		return parseSockaddr4(b)
	case fi.FormatSockaddr6:
		return parseSockaddr6(b)
	case fi.FormatSockaddr:
		if len(b) >= 2 && binary.NativeEndian.Uint16(b) == afInet {
			return parseSockaddr4(b)
		}
		return parseSockaddr6(b)
	case fi.FormatStr:
		return parseAddrStr(string(trimNUL(b)))
	}
	return endpoint{}, fi.EINVAL
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// parseSockaddr4 parses a struct sockaddr_in: family (host order), port
// (network order), the address, and 8 bytes of zero padding. It builds
// the IPv4-mapped endpoint itself, with endpointOf's checks (no port 0,
// no 0.0.0.0): through netip it took a third of a 1M insert's parsing.
func parseSockaddr4(b []byte) (endpoint, fi.Errno) {
	if len(b) != SockaddrInLen || binary.NativeEndian.Uint16(b) != afInet {
		return endpoint{}, fi.EINVAL
	}
	port := binary.BigEndian.Uint16(b[2:4])
	a4 := [4]byte(b[4:8])
	if port == 0 || a4 == [4]byte{} {
		return endpoint{}, fi.EINVAL
	}
	ep := endpoint{ip: [16]byte{10: 0xff, 11: 0xff}, port: port}
	copy(ep.ip[12:], a4[:])
	return ep, 0
}

// parseSockaddr6 parses a struct sockaddr_in6: family, port, flowinfo,
// address, scope id. Flow info and scope id are not kept.
func parseSockaddr6(b []byte) (endpoint, fi.Errno) {
	if len(b) != SockaddrIn6Len || binary.NativeEndian.Uint16(b) != afInet6 {
		return endpoint{}, fi.EINVAL
	}
	ap := netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:4]))
	return endpointOf(ap)
}

// parseAddrStr parses an FI_ADDR_STR address, fi_sockaddr_in://a.b.c.d:port
// or fi_sockaddr_in6://[addr]:port.
func parseAddrStr(s string) (endpoint, fi.Errno) {
	_, ep, errno := parseAddrStrAddr(s)
	return ep, errno
}

// parseAddrStrAddr is parseAddrStr that also returns the address as
// written: IPv4 for fi_sockaddr_in://, IPv6 (maybe IPv4-mapped) for
// fi_sockaddr_in6://.
func parseAddrStrAddr(s string) (netip.Addr, endpoint, fi.Errno) {
	var want4 bool
	switch {
	case strings.HasPrefix(s, strPrefix4):
		s, want4 = s[len(strPrefix4):], true
	case strings.HasPrefix(s, strPrefix6):
		s = s[len(strPrefix6):]
	default:
		return netip.Addr{}, endpoint{}, fi.EINVAL
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().Is4() != want4 {
		return netip.Addr{}, endpoint{}, fi.EINVAL
	}
	ep, errno := endpointOf(ap)
	return ap.Addr(), ep, errno
}

// AppendSockaddr appends ap as the binary address an AV opened for
// FI_SOCKADDR takes: struct sockaddr_in for IPv4 (and IPv4-mapped)
// addresses, sockaddr_in6 otherwise. Endpoints use it for fi_getname.
func AppendSockaddr(dst []byte, ap netip.AddrPort) []byte {
	return appendAddr(dst, fi.FormatSockaddr, endpoint{ip: ap.Addr().As16(), port: ap.Port()})
}

// appendAddr appends e in format f: the format an AV stores and fi_av_lookup
// returns. FI_SOCKADDR gives sockaddr_in for IPv4 (mapped) peers.
func appendAddr(dst []byte, f fi.AddrFormat, e endpoint) []byte {
	switch {
	case f == fi.FormatStr:
		return appendAddrStr(dst, e)
	case f == fi.FormatSockaddr4 || (f == fi.FormatSockaddr && e.is4()):
		var sa [SockaddrInLen]byte
		binary.NativeEndian.PutUint16(sa[0:], afInet)
		binary.BigEndian.PutUint16(sa[2:], e.port)
		copy(sa[4:8], e.ip[12:])
		return append(dst, sa[:]...)
	default:
		var sa [SockaddrIn6Len]byte
		binary.NativeEndian.PutUint16(sa[0:], afInet6)
		binary.BigEndian.PutUint16(sa[2:], e.port)
		copy(sa[8:24], e.ip[:])
		return append(dst, sa[:]...)
	}
}

// appendAddrStr appends e in FI_ADDR_STR form, which is also what
// fi_av_straddr prints.
func appendAddrStr(dst []byte, e endpoint) []byte {
	return appendAddrStrIn(dst, fi.FormatStr, e)
}

// appendAddrStrIn is appendAddrStr for an AV of format f: an
// FI_SOCKADDR_IN6 AV, which takes no fi_sockaddr_in:// address, writes an
// IPv4 peer IPv4-mapped (fi_sockaddr_in6://[::ffff:10.0.0.1]:7471).
func appendAddrStrIn(dst []byte, f fi.AddrFormat, e endpoint) []byte {
	if e.is4() && f != fi.FormatSockaddr6 {
		dst = append(dst, strPrefix4...)
		dst = netip.AddrFrom4([4]byte(e.ip[12:])).AppendTo(dst)
	} else {
		dst = append(dst, strPrefix6...)
		dst = append(dst, '[')
		dst = netip.AddrFrom16(e.ip).AppendTo(dst)
		dst = append(dst, ']')
	}
	dst = append(dst, ':')
	return strconv.AppendUint(dst, uint64(e.port), 10)
}

// ipAdd returns ip + n as a 128-bit big-endian integer, and false on
// overflow; for an IPv4-mapped ip the sum must stay within IPv4.
func ipAdd(ip [16]byte, n uint64) ([16]byte, bool) {
	hi := binary.BigEndian.Uint64(ip[:8])
	lo := binary.BigEndian.Uint64(ip[8:])
	if [12]byte(ip[:12]) == v4Prefix {
		v := uint64(binary.BigEndian.Uint32(ip[12:])) + n
		if v > 0xffffffff {
			return ip, false
		}
		binary.BigEndian.PutUint32(ip[12:], uint32(v))
		return ip, true
	}
	nlo := lo + n
	if nlo < lo {
		if hi == ^uint64(0) {
			return ip, false
		}
		hi++
	}
	binary.BigEndian.PutUint64(ip[:8], hi)
	binary.BigEndian.PutUint64(ip[8:], nlo)
	return ip, true
}

// ipSub returns a - b when it is non-negative and fits 64 bits.
func ipSub(a, b [16]byte) (uint64, bool) {
	ahi, alo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	bhi, blo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if ahi == bhi {
		return alo - blo, alo >= blo
	}
	if ahi == bhi+1 && alo < blo {
		return alo - blo, true // wraps to the right 64-bit difference
	}
	return 0, false
}
