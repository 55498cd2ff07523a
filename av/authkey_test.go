package av

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestAddrPortAuthKey: the data path's lookup of a destination answers the
// auth key handle its entry was inserted with (fi.AddrNotAvail without
// one), for TABLE and MAP AVs, symmetric ranges and fi_rx_addr'd handles,
// fails like AddrPort for unknown handles, and allocates nothing.
func TestAddrPortAuthKey(t *testing.T) {
	for _, typ := range []Type{TypeTable, TypeMap} {
		t.Run(typ.String(), func(t *testing.T) {
			a, _ := openTest(t, Attr{Type: typ, RxCtxBits: 4, Flags: fi.SYMMETRIC}, WithAVAuthKey())
			k1, err := a.InsertAuthKey([]byte("key-one!"), 0)
			require.NoError(t, err)
			k2, err := a.InsertAuthKey([]byte("key-two!"), 0)
			require.NoError(t, err)

			plain := fiAddrs(1)
			_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, plain, 0, nil)
			require.NoError(t, err)
			keyed := []fi.Addr{k1, k2}
			_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.2:1"), ap("10.0.0.3:1")}, keyed, fi.AUTH_KEY, nil)
			require.NoError(t, err)
			sym := []fi.Addr{k2, k2, k1, k1}
			_, err = a.InsertSym("10.1.0.1", 2, "7", 2, sym, fi.AUTH_KEY, nil)
			require.NoError(t, err)
			symPlain := fiAddrs(4)
			_, err = a.InsertSym("10.2.0.1", 2, "7", 2, symPlain, 0, nil)
			require.NoError(t, err)

			check := func(h fi.Addr, want netip.AddrPort, wantKey fi.Addr) {
				t.Helper()
				got, key, ok := a.AddrPortAuthKey(h)
				require.True(t, ok, "%#x", uint64(h))
				require.Equal(t, want, got)
				require.Equal(t, wantKey, key, "%#x", uint64(h))
				ap2, ok := a.AddrPort(h)
				require.True(t, ok)
				require.Equal(t, want, ap2)
				if wantKey != fi.AddrNotAvail { // the handle is the one LookupAuthKey agrees with
					var kb, ab [AuthKeySize]byte
					_, err := a.LookupAuthKey(wantKey, kb[:])
					require.NoError(t, err)
					_, err = a.LookupAuthKey(h, ab[:])
					require.NoError(t, err)
					require.Equal(t, kb, ab)
				}
			}
			check(plain[0], ap("10.0.0.1:1"), fi.AddrNotAvail)
			check(keyed[0], ap("10.0.0.2:1"), k1)
			check(keyed[1], ap("10.0.0.3:1"), k2)
			check(RxAddr(keyed[1], 3, 4), ap("10.0.0.3:1"), k2)
			check(sym[0], ap("10.1.0.1:7"), k2)
			check(sym[3], ap("10.1.0.2:8"), k1)
			check(symPlain[2], ap("10.2.0.2:7"), fi.AddrNotAvail)

			for _, h := range []fi.Addr{k1, fi.AddrNotAvail, fi.Addr(1) << 40, 1000} {
				_, key, ok := a.AddrPortAuthKey(h)
				require.False(t, ok, "%#x", uint64(h))
				require.Equal(t, fi.AddrNotAvail, key)
			}
			require.NoError(t, a.Remove(keyed[:1], 0))
			_, key, ok := a.AddrPortAuthKey(keyed[0])
			require.False(t, ok, "removed")
			require.Equal(t, fi.AddrNotAvail, key)

			var sink fi.Addr
			allocs := testing.AllocsPerRun(1000, func() {
				for _, h := range []fi.Addr{plain[0], keyed[1], sym[3], symPlain[1], k1} {
					_, key, _ := a.AddrPortAuthKey(h)
					sink += key
				}
			})
			require.Zero(t, allocs)
			require.NotZero(t, sink)
		})
	}
}
