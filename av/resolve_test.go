package av

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestResolve: Resolve gives what FIAddr and SourceAddr give, for a plain
// entry, a per-insert user ID, an FI_AV_USER_ID AV's entry before and
// after SetUserID, a symmetric range's member, and an unknown peer.
func TestResolve(t *testing.T) {
	same := func(a *AV, p string) {
		t.Helper()
		h, src := a.Resolve(ap(p))
		require.Equal(t, a.FIAddr(ap(p)), h, p)
		require.Equal(t, a.SourceAddr(ap(p)), src, p)
	}
	a, _ := openTest(t, Attr{Type: TypeMap})
	ids := []fi.Addr{100}
	_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, ids, fi.AV_USER_ID, nil)
	require.NoError(t, err)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.2:1")}, fiAddrs(1), 0, nil)
	require.NoError(t, err)
	h, src := a.Resolve(ap("10.0.0.1:1"))
	require.Equal(t, ids[0], h)
	require.Equal(t, fi.Addr(100), src)
	for _, p := range []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"} {
		same(a, p)
	}
	h, src = a.Resolve(ap("10.0.0.3:1"))
	require.Equal(t, fi.AddrNotAvail, h)
	require.Equal(t, fi.AddrNotAvail, src)

	u, _ := openTest(t, Attr{Type: TypeTable, Flags: fi.AV_USER_ID | fi.SYMMETRIC})
	out := fiAddrs(1)
	_, err = u.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, out, 0, nil)
	require.NoError(t, err)
	same(u, "10.0.0.1:1")
	require.NoError(t, u.SetUserID(out[0], 77, 0))
	same(u, "10.0.0.1:1")
	sym := fiAddrs(8)
	_, err = u.InsertSym("10.7.0.1", 2, "1", 4, sym, 0, nil)
	require.NoError(t, err)
	require.NoError(t, u.SetUserID(sym[5], 55, 0))
	for _, p := range []string{"10.7.0.2:2", "10.7.0.2:3"} {
		same(u, p)
	}
}
