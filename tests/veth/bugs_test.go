package veth

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestUDPSendSurvivesLocalDrop: a datagram the local stack drops on the
// way out (here an nftables egress rule; equally a full or dropping qdisc)
// is, by datapath.Transport's contract, not an error, and Send must not
// block on it. With IP_RECVERR set, the kernel reports such a drop to
// sendmmsg as ENOBUFS; datapath/udp's sendBatch treats ENOBUFS like EAGAIN
// ("wait for room in the socket buffer") and parks in the netpoller for a
// writability edge that never comes on an idle socket, so Send hangs, and
// with it reliable.Engine.Submit, which calls it under the engine's lock
// (seen as a fabric FetchAtomic that never returns while an nftables rule
// on the initiator's veth end dropped the requests).
func TestUDPSendSurvivesLocalDrop(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	for _, args := range [][]string{
		{"add", "table", "netdev", "xftbug"},
		{"add", "chain", "netdev", "xftbug", "out", "{ type filter hook egress device " + v.NameA + " priority 0; }"},
		{"add", "rule", "netdev", "xftbug", "out", "udp", "dport", "7999", "drop"},
	} {
		out, err := a.Exec("nft", args...)
		require.NoError(t, err, "nft %v: %s", args, out)
	}
	var u *udp.Transport
	do(t, a, func() (err error) {
		u, err = udp.Listen(netip.AddrPortFrom(v.AddrA.Addr(), 0), udp.Options{})
		return err
	})
	// Two datagrams: the first Send returns, the second never does.
	sent := make(chan error, 1)
	go func() {
		for range 2 {
			err := u.Send([]datapath.Packet{{Buf: []byte("dropped on the way out"), Addr: netip.AddrPortFrom(v.AddrB.Addr(), 7999)}})
			if err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	select {
	case err := <-sent:
		require.NoError(t, err, "a local drop is not an error")
	case <-time.After(2 * time.Second):
		u.Close() // releases the blocked Send
		<-sent
		t.Fatal("udp.Transport.Send blocked for 2 s on a datagram the local stack dropped (ENOBUFS under IP_RECVERR handled as EAGAIN in sendBatch)")
	}
	require.NoError(t, u.Close())
}
