package udpframe

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// checksumOK verifies a one's-complement checksum over data covering its
// own checksum field.
func checksumOK(data []byte, init uint32) bool { return fold(sum(data, init)) == 0xffff }

func TestBuildParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		csum     bool
	}{
		{"v4", "10.200.0.1:7471", "10.200.0.2:7472", false},
		{"v4-csum", "10.200.0.1:7471", "10.200.0.2:7472", true},
		{"v6", "[fd00::1]:7471", "[fd00::2]:7472", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Endpoints{SrcMAC: macA, DstMAC: macB,
				Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst), UDPChecksum: tc.csum}
			for _, plen := range []int{0, 1, 7, 1400} {
				frame := make([]byte, 2048)
				payload := frame[e.HeaderLen() : e.HeaderLen()+plen]
				for i := range payload {
					payload[i] = byte(i*7 + 3)
				}
				n, err := Build(frame, e, plen)
				require.NoError(t, err)
				require.Equal(t, e.HeaderLen()+plen, n)
				var p Parsed
				require.NoError(t, Parse(frame[:n], &p))
				require.Equal(t, e.Src, p.Src)
				require.Equal(t, e.Dst, p.Dst)
				require.Equal(t, e.HeaderLen(), p.PayloadOffset)
				require.Equal(t, plen, p.PayloadLen)
				require.Equal(t, []byte(macB), frame[0:6])
				udpOff := p.PayloadOffset - UDPLen
				if e.Src.Addr().Is4() {
					require.True(t, checksumOK(frame[EthLen:EthLen+IPv4Len], 0), "IPv4 header checksum")
				}
				if c := binary.BigEndian.Uint16(frame[udpOff+6:]); c != 0 {
					require.True(t, checksumOK(frame[udpOff:n], pseudoSum(frame, udpOff, e.Src.Addr().Is4(), n-udpOff)), "UDP checksum")
				} else {
					require.True(t, e.Src.Addr().Is4() && !tc.csum, "zero UDP checksum only for IPv4 without UDPChecksum")
				}
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	e := &Endpoints{SrcMAC: macA, DstMAC: macB,
		Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.MustParseAddrPort("10.0.0.2:2")}
	frame := make([]byte, 128)
	n, err := Build(frame, e, 10)
	require.NoError(t, err)
	var p Parsed
	for cut := 0; cut < n; cut++ {
		require.ErrorIs(t, Parse(frame[:cut], &p), ErrFrame, "truncated at %d", cut)
	}
	frag := append([]byte(nil), frame[:n]...)
	binary.BigEndian.PutUint16(frag[EthLen+6:], 0x2000) // MF
	require.ErrorIs(t, Parse(frag, &p), ErrFrame)
	tcp := append([]byte(nil), frame[:n]...)
	tcp[EthLen+9] = 6
	require.ErrorIs(t, Parse(tcp, &p), ErrFrame)
	arp := append([]byte(nil), frame[:n]...)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	require.ErrorIs(t, Parse(arp, &p), ErrFrame)

	// One VLAN tag is accepted.
	tagged := make([]byte, 0, n+4)
	tagged = append(tagged, frame[:12]...)
	tagged = append(tagged, 0x81, 0x00, 0x00, 0x05)
	tagged = append(tagged, frame[12:n]...)
	require.NoError(t, Parse(tagged, &p))
	require.Equal(t, e.Dst, p.Dst)
	require.Equal(t, 10, p.PayloadLen)
}

func BenchmarkBuildV4(b *testing.B) {
	e := &Endpoints{SrcMAC: macA, DstMAC: macB,
		Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.MustParseAddrPort("10.0.0.2:2")}
	frame := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(frame, e, 64); err != nil {
			b.Fatal(err)
		}
	}
}
