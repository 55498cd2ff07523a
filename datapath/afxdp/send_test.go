package afxdp_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestOversizeSendKeepsFrames: a datagram larger than the MTU fails Send
// with FI_EMSGSIZE, and neither its frame nor those of the batch's other
// datagrams is lost: after many more such batches than the socket has TX
// frames, every datagram that fits still goes out through AF_XDP, and
// the next one arrives. (Before the fix Send returned at the oversize datagram holding
// the frames already built for the batch: after 2048 batches no frame was
// left and every later datagram was dropped.)
func TestOversizeSendKeepsFrames(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	attachBoth(t, v, xdp.ModeNative)
	var tr *afxdp.Transport
	require.NoError(t, a.Do(func() error {
		var err error
		tr, err = afxdp.Open(afxdp.Options{Iface: v.NameA, Local: netip.AddrPortFrom(v.AddrA.Addr(), testPort)})
		return err
	}))
	t.Cleanup(func() { _ = tr.Close() })
	// The receiver: a plain socket on B's port that xdpfab does not serve.
	var rx *net.UDPConn
	require.NoError(t, b.Do(func() error {
		var err error
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: v.AddrB.Addr().AsSlice(), Port: 9000})
		return err
	}))
	t.Cleanup(func() { rx.Close() })
	require.NoError(t, rx.SetReadBuffer(4<<20))
	dst := netip.AddrPortFrom(v.AddrB.Addr(), 9000)
	small := []byte("fits")
	last := make(chan bool, 1)
	go func() {
		buf := make([]byte, 2048)
		for {
			_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
			m, _, err := rx.ReadFromUDP(buf)
			if err != nil || string(buf[:m]) == "last" {
				last <- err == nil
				return
			}
		}
	}()

	// Until the next hop's MAC is resolved, datagrams take the kernel
	// socket; wait for the AF_XDP path.
	one := []datapath.Packet{{Buf: small, Addr: dst}}
	require.Eventually(t, func() bool {
		require.NoError(t, tr.Send(one))
		return tr.Stats().TxXSK > 0
	}, 5*time.Second, time.Millisecond)
	before := tr.Stats()

	const rounds = 3000 // more than the socket's 2048 TX frames
	batch := []datapath.Packet{{Buf: small, Addr: dst}, {Buf: make([]byte, 2000), Addr: dst}, {Buf: small, Addr: dst}}
	for i := range rounds {
		err := tr.Send(batch)
		require.ErrorIs(t, err, fi.EMSGSIZE, "round %d", i)
	}
	after := tr.Stats()
	require.Equal(t, uint64(2*rounds), after.TxXSK-before.TxXSK, "every datagram that fits went out through AF_XDP")
	require.Equal(t, before.TxNoFrame, after.TxNoFrame, "no datagram lacked a frame")
	require.Equal(t, uint64(rounds), after.TxTooBig-before.TxTooBig)
	require.NoError(t, tr.Send([]datapath.Packet{{Buf: []byte("last"), Addr: dst}}))
	require.True(t, <-last, "a datagram sent after them arrived")
}
