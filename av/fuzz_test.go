package av

import (
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
	f.Fuzz(func(t *testing.T, format uint8, b []byte) {
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
