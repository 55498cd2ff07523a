package udpframe

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
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
		copying  bool
	}{
		{"v4", "10.200.0.1:7471", "10.200.0.2:7472", false},
		{"v4-copy", "10.200.0.1:7471", "10.200.0.2:7472", true},
		{"v6", "[fd00::1]:7471", "[fd00::2]:7472", false},
		{"v6-copy", "[fd00::1]:7471", "[fd00::2]:7472", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Endpoints{SrcMAC: macA, DstMAC: macB,
				Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst)}
			for _, plen := range []int{0, 1, 7, 8, 31, 33, 1400, 1401} {
				frame := make([]byte, 2048)
				payload := make([]byte, plen)
				for i := range payload {
					payload[i] = byte(i*7 + 3)
				}
				var n int
				var err error
				if tc.copying {
					n, err = BuildCopy(frame, e, payload)
				} else {
					copy(frame[e.HeaderLen():], payload)
					n, err = Build(frame, e, plen)
				}
				require.NoError(t, err)
				require.Equal(t, e.HeaderLen()+plen, n)
				var p Parsed
				require.NoError(t, Parse(frame[:n], &p))
				require.Equal(t, e.Src, p.Src)
				require.Equal(t, e.Dst, p.Dst)
				require.Equal(t, e.HeaderLen(), p.PayloadOffset)
				require.Equal(t, plen, p.PayloadLen)
				require.Equal(t, payload, frame[p.PayloadOffset:n])
				require.Equal(t, []byte(macB), frame[0:6])
				udpOff := p.PayloadOffset - UDPLen
				if e.Src.Addr().Is4() {
					require.True(t, checksumOK(frame[EthLen:EthLen+IPv4Len], 0), "IPv4 header checksum")
				}
				require.NotZero(t, binary.BigEndian.Uint16(frame[udpOff+6:]), "a UDP checksum is always sent")
				require.True(t, checksumOK(frame[udpOff:n], refPseudoSum(frame, e.Src.Addr().Is4(), n-udpOff)), "UDP checksum")
				require.True(t, Verify(frame[:n], &p))
			}
		})
	}
}

// refPseudoSum is the pseudo-header sum computed the plain way, for a frame
// without VLAN tag.
func refPseudoSum(frame []byte, v4 bool, udpLen int) uint32 {
	var s uint32
	addrs := frame[EthLen+8 : EthLen+40]
	if v4 {
		addrs = frame[EthLen+12 : EthLen+20]
	}
	for i := 0; i < len(addrs); i += 2 {
		s += uint32(binary.BigEndian.Uint16(addrs[i:]))
	}
	return s + 17 + uint32(udpLen)
}

// refSum is RFC 1071's loop: 16-bit big-endian words, carries folded at
// the end.
func refSum(b []byte) uint16 {
	var s uint64
	for i := 0; i+1 < len(b); i += 2 {
		s += uint64(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint64(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// TestSumMatchesReference checks the eight-bytes-at-a-time sum against RFC 1071's loop on every length up to 300 and some
// longer ones, on random bytes and on the all-ones worst case for carries.
func TestSumMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 5000)
	for _, fill := range []string{"random", "ones"} {
		for i := range buf {
			if fill == "ones" {
				buf[i] = 0xff
			} else {
				buf[i] = byte(rng.Uint32())
			}
		}
		lens := []int{4095, 4096, 4097, 5000}
		for n := 0; n <= 300; n++ {
			lens = append(lens, n)
		}
		for _, n := range lens {
			b := buf[:n]
			want := refSum(b)
			got := foldLE(sumLE(b, 0))
			// 0 and 0xffff are the same one's complement value.
			if want == 0xffff {
				want = 0
			}
			if got == 0xffff {
				got = 0
			}
			require.Equal(t, want, got, "%s, %d bytes", fill, n)
		}
	}
}

// TestVerifyRejects: a frame whose checksummed bytes (addresses, UDP
// header, payload) changed in flight fails Verify whatever byte changed, as
// does one sent without a checksum (0), IPv4 or IPv6.
func TestVerifyRejects(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"10.200.0.1:7471", "10.200.0.2:7472"},
		{"[fd00::1]:7471", "[fd00::2]:7472"},
	} {
		e := &Endpoints{SrcMAC: macA, DstMAC: macB,
			Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst)}
		payload := make([]byte, 123)
		for i := range payload {
			payload[i] = byte(i)
		}
		frame := make([]byte, 512)
		n, err := BuildCopy(frame, e, payload)
		require.NoError(t, err)
		frame = frame[:n]
		covered := EthLen + 12 // IPv4 source address
		if !e.Src.Addr().Is4() {
			covered = EthLen + 8
		}
		udpOff := e.HeaderLen() - UDPLen
		for off := covered; off < n; off++ {
			if off >= EthLen+IPv4Len && off < udpOff { // IPv6: the rest of the header
				continue
			}
			for _, flip := range []byte{0x01, 0x80, 0xff} {
				bad := append([]byte(nil), frame...)
				bad[off] ^= flip
				var p Parsed
				if Parse(bad, &p) != nil {
					continue // a length field: not even a UDP frame
				}
				require.False(t, Verify(bad, &p), "%s: byte %d ^ %#x not detected", tc.src, off, flip)
			}
		}
		none := append([]byte(nil), frame...)
		none[udpOff+6], none[udpOff+7] = 0, 0
		var p Parsed
		require.NoError(t, Parse(none, &p))
		require.False(t, Verify(none, &p), "%s: a zero (absent) checksum is refused", tc.src)
	}
}

// TestChecksumZeroIsSentAsOnes finds a payload whose checksum computes to
// 0: it must go out as 0xffff (0 would mean "none") and verify.
func TestChecksumZeroIsSentAsOnes(t *testing.T) {
	e := &Endpoints{SrcMAC: macA, DstMAC: macB,
		Src: netip.MustParseAddrPort("10.200.0.1:7471"), Dst: netip.MustParseAddrPort("10.200.0.2:7472")}
	frame := make([]byte, 128)
	found := false
	for v := 0; v < 1<<16 && !found; v++ {
		n, err := BuildCopy(frame, e, []byte{byte(v >> 8), byte(v)})
		require.NoError(t, err)
		if binary.BigEndian.Uint16(frame[n-2-2:]) != 0xffff {
			continue
		}
		found = true
		var p Parsed
		require.NoError(t, Parse(frame[:n], &p))
		require.True(t, Verify(frame[:n], &p))
	}
	require.True(t, found, "some two-byte payload sums to a zero checksum")
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

// BenchmarkBuild measures building a frame for payloads of several sizes,
// the payload copied in by the caller then summed (Build) or summed as it
// is copied (BuildCopy); "copy-only" is the copy alone, the floor.
func BenchmarkBuild(b *testing.B) {
	e := &Endpoints{SrcMAC: macA, DstMAC: macB,
		Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.MustParseAddrPort("10.0.0.2:2")}
	frame := make([]byte, 4096)
	for _, size := range []int{64, 1024, 3900} {
		payload := make([]byte, size)
		b.Run(fmt.Sprintf("copy-only/%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(frame[e.HeaderLen():], payload)
			}
		})
		b.Run(fmt.Sprintf("copy+Build/%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				copy(frame[e.HeaderLen():], payload)
				if _, err := Build(frame, e, size); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("BuildCopy/%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := BuildCopy(frame, e, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
