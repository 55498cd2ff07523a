package testenv_test

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestUDPCrossesVeth proves the helper: two namespaces joined by veth, a
// UDP datagram sent from one arrives in the other, and everything is gone
// after cleanup.
func TestUDPCrossesVeth(t *testing.T) {
	testenv.RequirePriv(t)
	var nsNames []string
	t.Run("cross", func(t *testing.T) {
		a, b := testenv.NewNetns(t), testenv.NewNetns(t)
		nsNames = []string{a.Name, b.Name}
		v := testenv.NewVeth(t, a, b, testenv.VethOptions{})

		var rx *net.UDPConn
		require.NoError(t, b.Do(func() error {
			var err error
			rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: v.AddrB.Addr().AsSlice(), Port: 7471})
			return err
		}))
		defer rx.Close()
		var tx *net.UDPConn
		require.NoError(t, a.Do(func() error {
			var err error
			tx, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(v.AddrB.Addr(), 7471)))
			return err
		}))
		defer tx.Close()

		msg := []byte("xdpfab across veth")
		buf := make([]byte, 64)
		// The first datagram can be lost to neighbour resolution; retry a
		// bounded number of times.
		for i := 0; i < 20; i++ {
			_, err := tx.Write(msg)
			require.NoError(t, err)
			require.NoError(t, rx.SetReadDeadline(time.Now().Add(250*time.Millisecond)))
			n, from, err := rx.ReadFromUDP(buf)
			if err != nil {
				continue
			}
			require.Equal(t, msg, buf[:n])
			require.Equal(t, v.AddrA.Addr().String(), from.IP.String())
			return
		}
		t.Fatal("datagram never crossed the veth pair")
	})
	for _, n := range nsNames {
		_, err := os.Stat("/var/run/netns/" + n)
		require.True(t, os.IsNotExist(err), "netns %s left behind", n)
	}
}

func TestPrivReasonIsOneLine(t *testing.T) {
	r := testenv.PrivReason()
	require.NotContains(t, r, "\n")
}
