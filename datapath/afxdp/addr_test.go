package afxdp_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestDestinationAddress: a transport receives only datagrams to its own
// address. Its port is configured bound to every address (as `xdpfab
// attach --port` does) and never Configured, so the program steers
// datagrams to any of B's addresses: the one to B's second address reaches
// the device but not the transport (RxOtherHost), the one to the
// transport's address does. While open, the device keeps the program's
// local_addrs map in step with B's addresses: one added or removed shows
// there without a new attach. A wildcard local address is refused.
func TestDestinationAddress(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	second := netip.MustParsePrefix("10.201.0.2/24")
	for _, c := range []struct {
		ns   *testenv.Netns
		args []string
	}{
		{b, []string{"addr", "add", second.String(), "dev", v.NameB}},
		{a, []string{"route", "add", second.Masked().String(), "dev", v.NameA}},
	} {
		out, err := c.ns.Exec("ip", c.args...)
		require.NoError(t, err, out)
	}
	require.NoError(t, a.SetTxChecksum(v.NameA, false)) // full checksums, as over a NIC
	require.NoError(t, b.Do(func() error {
		att, err := xdp.Attach(v.NameB, xdp.Options{Mode: xdp.ModeGeneric, Ports: map[uint16]xdp.PortConfig{testPort: {}}})
		if err != nil {
			return err
		}
		return att.Close()
	}))
	t.Cleanup(func() { _ = b.Do(func() error { return xdp.Detach(v.NameB) }) })

	require.NoError(t, b.Do(func() error {
		_, err := afxdp.Open(afxdp.Options{Iface: v.NameB, Local: netip.AddrPortFrom(netip.IPv4Unspecified(), testPort+1)})
		require.Error(t, err, "a wildcard local address is refused")
		return nil
	}))
	var tr *afxdp.Transport
	require.NoError(t, b.Do(func() (err error) {
		tr, err = afxdp.Open(afxdp.Options{Iface: v.NameB, Local: netip.AddrPortFrom(v.AddrB.Addr(), testPort)})
		return err
	}))
	t.Cleanup(func() { tr.Close() })

	var tx *net.UDPConn
	require.NoError(t, a.Do(func() (err error) {
		tx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(v.AddrA.Addr(), 6000)))
		return err
	}))
	t.Cleanup(func() { tx.Close() })
	pkts := make([]datapath.Packet, 8)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 2048)
	}
	// received sends msg to dst until the transport gets something or
	// tries run out, and reports what it got.
	received := func(dst netip.Addr, msg string, tries int) []string {
		var got []string
		for range tries {
			_, err := tx.WriteToUDPAddrPort([]byte(msg), netip.AddrPortFrom(dst, testPort))
			require.NoError(t, err)
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) && len(got) == 0 {
				n, err := tr.Receive(pkts, false)
				require.NoError(t, err)
				for _, p := range pkts[:n] {
					got = append(got, string(p.Buf))
				}
				time.Sleep(time.Millisecond)
			}
			if len(got) > 0 {
				return got
			}
		}
		return got
	}

	require.Empty(t, received(second.Addr(), "to the second address", 5))
	st := tr.Stats()
	require.Positive(t, st.RxOtherHost, "steered by the wildcard entry, stopped by the device")
	require.Zero(t, st.RxXSK)
	require.Equal(t, []string{"to the transport"}, received(v.AddrB.Addr(), "to the transport", 10))
	require.Equal(t, uint64(1), tr.Stats().RxXSK)

	local := func() []netip.Addr {
		var addrs []netip.Addr
		require.NoError(t, b.Do(func() error {
			att, err := xdp.Open(v.NameB)
			if err != nil {
				return err
			}
			defer att.Close()
			addrs, err = att.LocalAddrs()
			return err
		}))
		return addrs
	}
	third := netip.MustParsePrefix("10.202.0.2/32")
	out, err := b.Exec("ip", "addr", "add", third.String(), "dev", v.NameB)
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return slices.Contains(local(), third.Addr()) }, 5*time.Second, 10*time.Millisecond,
		"an address added while the device is open reaches local_addrs")
	out, err = b.Exec("ip", "addr", "del", second.String(), "dev", v.NameB)
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return !slices.Contains(local(), second.Addr()) }, 5*time.Second, 10*time.Millisecond,
		"an address removed while the device is open leaves local_addrs")
}
