package av

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// FuzzParseAddr: any bytes in any format parse or fail with FI_EINVAL,
// never panic, and what parses comes back the same through Lookup's
// encoding.
func FuzzParseAddr(f *testing.F) {
	f.Add(uint8(2), sin("10.0.0.1:7471"))
	f.Add(uint8(3), sin6("[fe80::1]:7471"))
	f.Add(uint8(1), sin6("[::ffff:10.0.0.1]:1"))
	f.Add(uint8(9), []byte("fi_sockaddr_in6://[fe80::1%eth0]:7471"))
	f.Add(uint8(9), []byte("fi_sockaddr_in://10.0.0.1:65535\x00"))
	f.Add(uint8(2), sin("0.0.0.0:7471"))
	f.Add(uint8(2), sin("10.0.0.1:0"))
	f.Fuzz(func(t *testing.T, format uint8, b []byte) {
		// sockaddr_in is parsed by hand: it agrees with netip's parse.
		if len(b) == SockaddrInLen && binary.NativeEndian.Uint16(b) == afInet {
			want, wantErr := endpointOf(netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])))
			got, gotErr := parseSockaddr4(b)
			if got != want || gotErr != wantErr {
				t.Fatalf("%q: %v %v, netip says %v %v", b, got, gotErr, want, wantErr)
			}
		}
		for _, fm := range []fi.AddrFormat{fi.FormatSockaddr, fi.FormatSockaddr4, fi.FormatSockaddr6, fi.FormatStr} {
			if uint8(fm) != format%10 && format%10 != 0 {
				continue
			}
			ep, errno := parseAddr(fm, b)
			if errno != 0 {
				if errno != fi.EINVAL {
					t.Fatalf("%v %q: errno %v", fm, b, errno)
				}
				continue
			}
			if ep.port == 0 || ep.addrPort().Addr().IsUnspecified() {
				t.Fatalf("%v %q parsed to %v", fm, b, ep.addrPort())
			}
			again, errno := parseAddr(fm, appendAddr(nil, fm, ep))
			if errno != 0 || again != ep {
				t.Fatalf("%v %q: %v does not round-trip (%v, %v)", fm, b, ep.addrPort(), again.addrPort(), errno)
			}
		}
	})
}
