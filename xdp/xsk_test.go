package xdp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestXSKRedirect binds an AF_XDP socket to queue 0 of the attached
// interface: status reports the queue bound, xdpfab datagrams from a known
// peer arrive in the socket with the metadata (fi_addr, auth key, checksum
// verified) right before the packet, strangers on a loose port arrive marked unknown,
// and other UDP still goes to the stack.
func TestXSKRedirect(t *testing.T) {
	const (
		strictPort = 4791
		loosePort  = 4792
		peerPort   = 6001
		avID       = 3
	)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t)
			a := p.mustAttach(t, xdp.Options{Mode: mode, Ports: map[uint16]xdp.PortConfig{
				strictPort: {AVID: avID, Strict: true}, loosePort: {AVID: avID},
			}})
			addrA, addrB := p.v.AddrA.Addr(), p.v.AddrB.Addr()
			// A's kernel sockets put full checksums on the wire, as over
			// a NIC: the program verifies them.
			require.NoError(t, p.a.SetTxChecksum(p.v.NameA, false))
			require.NoError(t, a.AVMap.Put(bpf.XdpfabAvKey{AvId: avID, Port: htons(peerPort), Addr: addrA.As16()},
				bpf.XdpfabAvValue{FiAddr: 77, AuthKeyId: 5}))

			var sock *xsk.Socket
			require.NoError(t, p.b.Do(func() (err error) {
				sock, err = xsk.Open(p.v.IndexB, 0, xsk.Options{NumFrames: 64, RingSize: 64})
				return err
			}))
			t.Cleanup(func() { sock.Close() })
			require.NoError(t, a.SetXSK(0, sock.FD()))
			qs, err := a.BoundQueues()
			require.NoError(t, err)
			require.Equal(t, []uint32{0}, qs)

			tx := udpListen(t, p.a, netip.AddrPortFrom(addrA, peerPort))
			stranger := udpListen(t, p.a, netip.AddrPortFrom(addrA, peerPort+1))

			// receiveXSK sends msg from c to port until the socket gets it,
			// and returns its metadata.
			receiveXSK := func(c interface {
				WriteToUDPAddrPort([]byte, netip.AddrPort) (int, error)
			}, port uint16, msg string) (bpf.Meta, bool) {
				descs := make([]xsk.Desc, 16)
				var parsed udpframe.Parsed
				deadline := time.Now().Add(3 * time.Second)
				for time.Now().Before(deadline) {
					_, err := c.WriteToUDPAddrPort([]byte(msg), netip.AddrPortFrom(addrB, port))
					require.NoError(t, err)
					ready, err := sock.Poll(100)
					require.NoError(t, err)
					if !ready {
						continue
					}
					n := sock.Receive(descs)
					for _, d := range descs[:n] {
						f := sock.Frame(d)
						if udpframe.Parse(f, &parsed) != nil || parsed.Dst.Port() != port ||
							string(f[parsed.PayloadOffset:parsed.PayloadOffset+parsed.PayloadLen]) != msg {
							continue
						}
						m, ok := bpf.ParseMeta(sock.Meta(d, bpf.MetaLen))
						sock.Release(descs[:n])
						return m, ok
					}
					sock.Release(descs[:n])
				}
				t.Fatalf("%q never reached the AF_XDP socket", msg)
				return bpf.Meta{}, false
			}

			before := counters(t, a)
			m, ok := receiveXSK(tx, strictPort, "to the xsk")
			require.True(t, ok, "metadata magic in front of the packet")
			require.Equal(t, uint64(77), m.FiAddr)
			require.Equal(t, uint32(5), m.AuthKeyId)
			require.Equal(t, uint8(bpf.MetaCsumOK), m.Flags, "checksum verified; the payload is not read")
			after := counters(t, a)
			require.Positive(t, after[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK]-before[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK])

			m, ok = receiveXSK(stranger, loosePort, "stranger, loose port")
			require.True(t, ok)
			require.Equal(t, ^uint64(0), m.FiAddr, "FI_ADDR_NOTAVAIL")
			require.Equal(t, uint8(bpf.MetaPeerUnknown|bpf.MetaCsumOK), m.Flags)

			// Other UDP is not redirected.
			rxOther := udpListen(t, p.b, netip.AddrPortFrom(addrB, 5555))
			require.True(t, receives(t, tx, rxOther, netip.AddrPortFrom(addrB, 5555), "other udp", 10))

			// Unbound, xdpfab datagrams fall back to the stack.
			require.NoError(t, a.DeleteXSK(0))
			qs, err = a.BoundQueues()
			require.NoError(t, err)
			require.Empty(t, qs)
			rxFab := udpListen(t, p.b, netip.AddrPortFrom(addrB, strictPort))
			require.True(t, receives(t, tx, rxFab, netip.AddrPortFrom(addrB, strictPort), "back to the stack", 10))

			// Bound again, a datagram whose checksum A's kernel left to
			// offload (veth's default) does not verify in XDP: it goes to
			// the stack, which knows it was sent in-host and delivers it.
			require.NoError(t, a.SetXSK(0, sock.FD()))
			require.NoError(t, p.a.SetTxChecksum(p.v.NameA, true))
			before = counters(t, a)
			require.True(t, receives(t, tx, rxFab, netip.AddrPortFrom(addrB, strictPort), "checksum left to offload", 10))
			after = counters(t, a)
			require.Positive(t, after[bpf.XdpfabXdpfabCounterCNT_PASS_BAD_CSUM]-before[bpf.XdpfabXdpfabCounterCNT_PASS_BAD_CSUM])
			require.Equal(t, before[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK], after[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK])
		})
	}
}
