package xsk_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestWarmKernelMapping: on a veth, WarmKernelMapping has the kernel take
// one oversized frame per page of the fill ring's initial frames and of
// the first TX frames, the veth drops every one of them (the peer's
// interface receives nothing, its socket nothing), the frames stay where
// they were, and the socket transmits as before.
func TestWarmKernelMapping(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})

	var ua *net.UDPConn
	require.NoError(t, a.Do(func() error {
		var err error
		ua, err = net.ListenUDP("udp4", &net.UDPAddr{IP: v.AddrA.Addr().AsSlice(), Port: 9000})
		return err
	}))
	defer ua.Close()
	rxPackets := func() uint64 {
		l, err := a.Netlink().LinkByName(v.NameA)
		require.NoError(t, err)
		return l.Attrs().Statistics.RxPackets
	}

	var sock *xsk.Socket
	require.NoError(t, b.Do(func() error {
		var err error
		sock, err = xsk.Open(v.IndexB, 0, xsk.Options{FrameSize: 2048})
		return err
	}))
	t.Cleanup(func() { sock.Close() })
	require.Equal(t, xsk.BindCopy, sock.Mode())

	before := rxPackets()
	pages, err := sock.WarmKernelMapping()
	require.NoError(t, err)
	// 512 receive and 512 transmit frames of 2048 bytes: two a page.
	require.Equal(t, 256+256, pages)
	require.Equal(t, before, rxPackets(), "a warm frame reached the peer")
	require.Equal(t, 512, sock.FillFrames())
	require.Zero(t, sock.Reclaim(), "frames in flight after the warm")
	st, err := sock.Stats()
	require.NoError(t, err)
	require.Zero(t, st.Tx_invalid_descs)

	// The socket transmits as before: a burst reaches A's kernel socket.
	la, err := a.Netlink().LinkByName(v.NameA)
	require.NoError(t, err)
	lb, err := b.Netlink().LinkByName(v.NameB)
	require.NoError(t, err)
	ep := &udpframe.Endpoints{SrcMAC: lb.Attrs().HardwareAddr, DstMAC: la.Attrs().HardwareAddr,
		Src: netip.AddrPortFrom(v.AddrB.Addr(), xskPort), Dst: netip.AddrPortFrom(v.AddrA.Addr(), 9000)}
	const burst = 16
	transmitBurst(t, sock, ep, burst, "after the warm")
	rbuf := make([]byte, 2048)
	require.NoError(t, ua.SetReadDeadline(time.Now().Add(5*time.Second)))
	for i := 0; i < burst; i++ {
		n, _, err := ua.ReadFromUDP(rbuf)
		require.NoError(t, err, "received %d of %d", i, burst)
		require.Contains(t, string(rbuf[:n]), "after the warm")
	}
	require.Eventually(t, func() bool { return sock.Reclaim() == 0 }, 2*time.Second, 10*time.Millisecond)
}
