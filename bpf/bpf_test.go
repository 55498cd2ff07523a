package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestGeneratedUpToDate fails when the C sources changed after the committed
// objects were generated: run `make generate`.
func TestGeneratedUpToDate(t *testing.T) {
	recorded, err := os.ReadFile("sources.sha256")
	require.NoError(t, err)
	var want strings.Builder
	for _, f := range []string{"gen.go", "xdpfab.c", "xdpfab.h", "kserve.h"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		fmt.Fprintf(&want, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	require.Equal(t, want.String(), string(recorded),
		"bpf/ sources changed since the objects were generated: run `make generate` and commit the result")

	obj, err := os.Stat("xdpfab_bpfel.o")
	require.NoError(t, err)
	require.NotZero(t, obj.Size())
}

// TestSpecLayout checks the committed object against the layouts Go relies on.
func TestSpecLayout(t *testing.T) {
	spec, err := LoadXdpfab()
	require.NoError(t, err)
	// Kernel tables: arrays of 512-byte buckets of 64-byte slots, whose
	// key and value words the AV and MR types fill.
	require.Equal(t, 64, binary.Size(XdpfabKtSlot{}))
	require.Equal(t, ktable.BucketSize, binary.Size(XdpfabKtBucket{}))
	// AV peer tables: arrays of 256-byte buckets of 32-byte slots, the
	// header at the start of bucket 0.
	require.Equal(t, ktable.AVTSlotSize, binary.Size(XdpfabAvtSlot{}))
	require.Equal(t, ktable.AVTBucketSize, binary.Size(XdpfabAvtBucket{}))
	require.LessOrEqual(t, binary.Size(XdpfabAvtHeader{}), ktable.AVTBucketSize)
	require.LessOrEqual(t, binary.Size(XdpfabAvKey{}), 24)
	require.LessOrEqual(t, binary.Size(XdpfabAvValue{}), 32)
	require.LessOrEqual(t, binary.Size(XdpfabMrKey{}), 24)
	require.LessOrEqual(t, binary.Size(XdpfabMrValue{}), 32)
	av := spec.Maps[XdpfabMapAvMap]
	require.NotNil(t, av)
	require.Equal(t, ebpf.HashOfMaps, av.Type)
	require.Equal(t, uint32(4), av.KeySize)
	require.Equal(t, uint32(AVMapMaxAVs), av.MaxEntries)
	require.NotNil(t, av.InnerMap)
	require.Equal(t, ebpf.Array, av.InnerMap.Type)
	require.Equal(t, uint32(ktable.AVTBucketSize), av.InnerMap.ValueSize)
	require.Equal(t, uint32(unix.BPF_F_MMAPABLE|unix.BPF_F_INNER_MAP), av.InnerMap.Flags)
	mr := spec.Maps[XdpfabMapMrMap]
	require.NotNil(t, mr)
	require.Equal(t, ebpf.Array, mr.Type)
	require.Equal(t, uint32(unix.BPF_F_MMAPABLE), mr.Flags)
	require.Equal(t, uint32(4), mr.KeySize)
	require.Equal(t, uint32(ktable.BucketSize), mr.ValueSize)
	require.Equal(t, uint32(1+MRTableBuckets), mr.MaxEntries)
	require.Equal(t, ebpf.PerCPUArray, spec.Maps[XdpfabMapCounters].Type)
	require.Equal(t, uint32(XdpfabXdpfabCounterCNT_MAX), spec.Maps[XdpfabMapCounters].MaxEntries)
	ports := spec.Maps[XdpfabMapPorts]
	require.Equal(t, uint32(2), ports.KeySize)
	require.Equal(t, uint32(32), ports.ValueSize)
	local := spec.Maps[XdpfabMapLocalAddrs]
	require.Equal(t, ebpf.Hash, local.Type)
	require.Equal(t, uint32(16), local.KeySize)
	require.Equal(t, ebpf.XSKMap, spec.Maps[XdpfabMapXsks].Type)
	require.Equal(t, uint32(XSKMaxQueues), spec.Maps[XdpfabMapXsks].MaxEntries)

	var meta *btf.Struct
	require.NoError(t, spec.Types.TypeByName("xdp_meta", &meta))
	require.Equal(t, uint32(MetaLen), meta.Size)
	require.LessOrEqual(t, meta.Size, uint32(32), "the kernel allows at most 32 bytes of XDP metadata")
	require.Zero(t, meta.Size%4, "XDP metadata length must be a multiple of 4")
	last := meta.Members[len(meta.Members)-1]
	require.Equal(t, "magic", last.Name)
	require.Equal(t, btf.Bits((MetaLen-4)*8), last.Offset, "magic must end the metadata, next to the packet")
}

// TestCounterNamesInSync checks that every enumerator of the C enums in the
// compiled object has a Go name and description, and vice versa.
func TestCounterNamesInSync(t *testing.T) {
	spec, err := LoadXdpfab()
	require.NoError(t, err)
	for _, tc := range []struct {
		enum  string
		max   string
		table []enumInfo
	}{
		{"xdpfab_counter", "CNT_MAX", counterInfo[:]},
	} {
		t.Run(tc.enum, func(t *testing.T) {
			var e *btf.Enum
			require.NoError(t, spec.Types.TypeByName(tc.enum, &e))
			seen := map[uint64]bool{}
			for _, v := range e.Values {
				if v.Name == tc.max {
					require.Equal(t, uint64(len(tc.table)), v.Value, "%s: Go table length", tc.max)
					continue
				}
				require.Less(t, v.Value, uint64(len(tc.table)), "C enumerator %s has no Go name", v.Name)
				info := tc.table[v.Value]
				require.Equal(t, v.Name, info.cName, "Go entry %d names another enumerator", v.Value)
				require.NotEmpty(t, info.name)
				require.NotEmpty(t, info.desc)
				seen[v.Value] = true
			}
			names := map[string]bool{}
			for i, info := range tc.table {
				require.True(t, seen[uint64(i)], "Go entry %d (%s) is not in the C enum", i, info.cName)
				require.False(t, names[info.name], "duplicate name %s", info.name)
				names[info.name] = true
			}
		})
	}
	require.Len(t, Counters(), int(XdpfabXdpfabCounterCNT_MAX))
	require.Equal(t, "drop_unknown_peer", XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER.String())
}

// xdpMd is struct xdp_md, the context BPF_PROG_TEST_RUN takes and returns:
// on return Data is the length of the metadata in front of the packet.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
)

var (
	peer4     = netip.MustParseAddrPort("10.200.0.1:5000")
	peer6     = netip.MustParseAddrPort("[fd00::1]:5000")
	stranger4 = netip.MustParseAddrPort("10.200.0.9:5000")
	self4     = netip.MustParseAddr("10.200.0.2")
	self6     = netip.MustParseAddr("fd00::2")
	// Another address of this host (in local_addrs), and one of another
	// host whose traffic reaches this one (forwarded or bridged).
	alsoSelf4 = netip.MustParseAddr("10.201.0.2")
	otherHost = netip.MustParseAddr("10.251.0.77")
	other6    = netip.MustParseAddr("fd00::77")
)

const (
	portStrict = 4791 // bound to every local address (wildcard), strict
	portLoose  = 4792 // wildcard, not strict
	portBound4 = 4793 // bound to self4, strict
	portBound6 = 4794 // bound to self6, strict
	portOther  = 9999
	avID       = 1
	domainID   = 3
)

func loadTestObjects(t testing.TB) *XdpfabObjects {
	t.Helper()
	testenv.RequirePriv(t)
	spec, err := LoadXdpfab()
	require.NoError(t, err)
	// Small maps: the test needs a handful of entries.
	spec.Maps[XdpfabMapAvMap].MaxEntries = 64
	spec.Maps[XdpfabMapMrMap].MaxEntries = 3 // the smallest table; not read by the program
	var objs XdpfabObjects
	require.NoError(t, spec.LoadAndAssign(&objs, nil))
	t.Cleanup(func() { objs.Close() })
	peers := newAVTable(t, objs.AvMap, avID, false) // peer6 too: 32-byte slots

	for port, flags := range map[uint16]uint32{portStrict: PortStrict, portLoose: 0} {
		require.NoError(t, objs.Ports.Put(htons(port), XdpfabPortConfig{AvId: avID, DomainId: domainID, Flags: flags}))
	}
	for port, addr := range map[uint16]netip.Addr{portBound4: self4, portBound6: self6} {
		require.NoError(t, objs.Ports.Put(htons(port), XdpfabPortConfig{AvId: avID, DomainId: domainID,
			Flags: PortStrict | PortBoundAddr, Addr: addr.As16()}))
	}
	for _, a := range []netip.Addr{self4, self6, alsoSelf4} {
		require.NoError(t, objs.LocalAddrs.Put(XdpfabLocalAddr{Addr: a.As16()}, uint32(0)))
	}
	for ap, fiAddr := range map[netip.AddrPort]uint64{peer4: 42, peer6: 43} {
		putPeer(t, peers, avKey(avID, ap), XdpfabAvValue{FiAddr: fiAddr, AuthKeyId: 7})
	}
	return &objs
}

func htons(p uint16) uint16 { return p<<8 | p>>8 }

func avKey(av uint32, ap netip.AddrPort) XdpfabAvKey {
	return XdpfabAvKey{AvId: av, Port: htons(ap.Port()), Addr: ap.Addr().As16()}
}

func readCounters(t *testing.T, m *ebpf.Map) []uint64 {
	t.Helper()
	out := make([]uint64, XdpfabXdpfabCounterCNT_MAX)
	for c := range out {
		var perCPU []uint64
		require.NoError(t, m.Lookup(uint32(c), &perCPU))
		for _, v := range perCPU {
			out[c] += v
		}
	}
	return out
}

// runResult is what one BPF_PROG_TEST_RUN returned.
type runResult struct {
	action uint32
	meta   []byte // metadata in front of the output packet
	out    []byte // the output packet
}

func run(t *testing.T, prog *ebpf.Program, data []byte) runResult {
	t.Helper()
	in := xdpMd{DataEnd: uint32(len(data))}
	var ctxOut xdpMd
	opts := ebpf.RunOptions{
		Data:       data,
		DataOut:    make([]byte, len(data)+64),
		Context:    in,
		ContextOut: &ctxOut,
	}
	act, err := prog.Run(&opts)
	require.NoError(t, err)
	require.LessOrEqual(t, int(ctxOut.Data), len(opts.DataOut))
	return runResult{action: act, meta: opts.DataOut[:ctxOut.Data], out: opts.DataOut[ctxOut.Data:]}
}

// wantMeta is the metadata a case expects.
type wantMeta struct {
	fiAddr  uint64
	flags   uint8
	authKey uint32
}

// known is the metadata of a datagram from peer4 or peer6 (fi_addr 42 or
// 43, auth key 7).
func known(fiAddr uint64) *wantMeta { return &wantMeta{fiAddr: fiAddr, authKey: 7} }

func udp(src netip.AddrPort, dport uint16, payload []byte) frame {
	dst := self4
	if src.Addr().Is6() {
		dst = self6
	}
	return frame{src: src, dst: netip.AddrPortFrom(dst, dport), payload: payload}
}

// to readdresses f to dst, keeping its port.
func to(f frame, dst netip.Addr) frame {
	f.dst = netip.AddrPortFrom(dst, f.dst.Port())
	return f
}

const (
	cntTotal     = XdpfabXdpfabCounterCNT_RX_TOTAL
	cntNotIP     = XdpfabXdpfabCounterCNT_PASS_NOT_IP
	cntNotUDP    = XdpfabXdpfabCounterCNT_PASS_NOT_UDP
	cntFrag      = XdpfabXdpfabCounterCNT_PASS_FRAGMENT
	cntMalformed = XdpfabXdpfabCounterCNT_PASS_MALFORMED
	cntOtherPort = XdpfabXdpfabCounterCNT_PASS_OTHER_PORT
	cntOtherHost = XdpfabXdpfabCounterCNT_PASS_OTHER_HOST
	cntKnown     = XdpfabXdpfabCounterCNT_PEER_KNOWN
	cntUnknown   = XdpfabXdpfabCounterCNT_PEER_UNKNOWN
	cntDropPeer  = XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER
	cntNoCsum    = XdpfabXdpfabCounterCNT_DROP_NO_CSUM
	cntBadCsum   = XdpfabXdpfabCounterCNT_PASS_BAD_CSUM
	cntNoXSK     = XdpfabXdpfabCounterCNT_PASS_NO_XSK

	unknown = MetaPeerUnknown
)

// TestProgram runs the XDP program with BPF_PROG_TEST_RUN on crafted
// packets and checks the action, the output bytes (always the input
// unchanged), the metadata and which counters moved.
func TestProgram(t *testing.T) {
	objs := loadTestObjects(t)

	msg := request(msgOp(16))
	tcpish := make([]byte, 20)
	icmpEcho := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}
	arp := make([]byte, 28)
	p4, p6 := known(42), known(43)

	// Each case names the counters besides CNT_RX_TOTAL that must move by one.
	cases := []struct {
		name     string
		frame    frame
		action   uint32
		meta     *wantMeta // nil: no metadata
		counters []Counter
	}{
		// Not ours: passed unchanged, no metadata.
		{"arp", frame{etherType: 0x0806, payload: arp}, xdpPass, nil, []Counter{cntNotIP}},
		{"icmp", frame{src: peer4, dst: netip.AddrPortFrom(self4, 0), proto: 1, payload: icmpEcho}, xdpPass, nil, []Counter{cntNotUDP}},
		{"tcp to an xdpfab port", frame{src: peer4, dst: netip.AddrPortFrom(self4, portStrict), proto: 6, payload: tcpish}, xdpPass, nil, []Counter{cntNotUDP}},
		{"udp other port", udp(peer4, portOther, msg), xdpPass, nil, []Counter{cntOtherPort}},
		{"udp other port from stranger", udp(stranger4, portOther, msg), xdpPass, nil, []Counter{cntOtherPort}},
		{"ipv6 udp other port", udp(peer6, portOther, msg), xdpPass, nil, []Counter{cntOtherPort}},
		{"ipv4 fragment MF", withFrag(udp(peer4, portStrict, msg), 0x2000), xdpPass, nil, []Counter{cntFrag}},
		{"ipv4 fragment offset", withFrag(udp(peer4, portStrict, msg), 0x0010), xdpPass, nil, []Counter{cntFrag}},
		{"ipv6 fragment header", withV6Frag(udp(peer6, portStrict, msg)), xdpPass, nil, []Counter{cntFrag}},
		{"ipv4 ihl below 5", withIHL(udp(peer4, portStrict, msg), 4), xdpPass, nil, []Counter{cntMalformed}},
		{"udp length below 8", withUDPLen(udp(peer4, portStrict, msg), 7), xdpPass, nil, []Counter{cntMalformed}},
		{"udp length beyond ip", withUDPLen(udp(peer4, portStrict, msg), 8+len(msg)+1), xdpPass, nil, []Counter{cntMalformed}},
		{"ip length beyond frame", withIPLen(udp(peer4, portStrict, msg), 20+8+len(msg)+1), xdpPass, nil, []Counter{cntMalformed}},
		{"ipv6 payload length beyond frame", withIPLen(udp(peer6, portStrict, msg), 8+len(msg)+1), xdpPass, nil, []Counter{cntMalformed}},
		{"ipv6 udp length below 8", withUDPLen(udp(peer6, portStrict, msg), 7), xdpPass, nil, []Counter{cntMalformed}},
		{"ipv6 udp length beyond ip", withUDPLen(udp(peer6, portStrict, msg), 8+len(msg)+1), xdpPass, nil, []Counter{cntMalformed}},
		{"ipv6 tcp", frame{src: peer6, dst: netip.AddrPortFrom(self6, portStrict), proto: 6, payload: tcpish}, xdpPass, nil, []Counter{cntNotUDP}},
		{"ip version mismatch", withVersion6In4(udp(peer4, portStrict, msg)), xdpPass, nil, []Counter{cntMalformed}},

		// Destination address: only the port's bound address, or for a
		// wildcard port any address of this host, is xdpfab's; traffic
		// for other hosts passes untouched, even from strangers to a
		// strict port.
		{"bound port, own address", udp(peer4, portBound4, msg), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"bound port, other host", to(udp(peer4, portBound4, msg), otherHost), xdpPass, nil, []Counter{cntOtherHost}},
		{"bound port, other host, stranger", to(udp(stranger4, portBound4, msg), otherHost), xdpPass, nil, []Counter{cntOtherHost}},
		{"bound port, another own address", to(udp(peer4, portBound4, msg), alsoSelf4), xdpPass, nil, []Counter{cntOtherHost}},
		{"bound port, own address, stranger", udp(stranger4, portBound4, msg), xdpDrop, nil, []Counter{cntDropPeer}},
		{"bound port, vlan other host", withVLAN(to(udp(peer4, portBound4, msg), otherHost)), xdpPass, nil, []Counter{cntOtherHost}},
		{"bound ipv6 port, own address", udp(peer6, portBound6, msg), xdpPass, p6, []Counter{cntKnown, cntNoXSK}},
		{"bound ipv6 port, other host", to(udp(peer6, portBound6, msg), other6), xdpPass, nil, []Counter{cntOtherHost}},
		{"ipv4 bound port, ipv6 datagram", udp(peer6, portBound4, msg), xdpPass, nil, []Counter{cntOtherHost}},
		{"ipv4 bound port, ipv6 datagram to its mapped address", to(udp(peer6, portBound4, msg), netip.AddrFrom16(self4.As16())), xdpPass, nil, []Counter{cntOtherHost}},
		{"wildcard port, ipv6 datagram to a mapped own address", to(udp(peer6, portStrict, msg), netip.AddrFrom16(self4.As16())), xdpPass, nil, []Counter{cntOtherHost}},
		{"wildcard port, own address", udp(peer4, portStrict, msg), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"wildcard port, another own address", to(udp(peer4, portStrict, msg), alsoSelf4), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"wildcard port, other host", to(udp(peer4, portStrict, msg), otherHost), xdpPass, nil, []Counter{cntOtherHost}},
		{"wildcard port, other host, stranger", to(udp(stranger4, portStrict, msg), otherHost), xdpPass, nil, []Counter{cntOtherHost}},
		{"wildcard ipv6 port, other host", to(udp(peer6, portLoose, msg), other6), xdpPass, nil, []Counter{cntOtherHost}},

		// UDP checksum: absent (0) is dropped, wrong passes to the stack
		// (which drops it, or keeps it when an in-host sender left it to
		// offload) without metadata; the AV check comes first.
		{"ipv4 no checksum", withCsum(udp(peer4, portStrict, msg), 0), xdpDrop, nil, []Counter{cntKnown, cntNoCsum}},
		{"ipv6 no checksum", withCsum(udp(peer6, portStrict, msg), 0), xdpDrop, nil, []Counter{cntKnown, cntNoCsum}},
		{"ipv4 bad checksum", withBadCsum(udp(peer4, portStrict, msg)), xdpPass, nil, []Counter{cntKnown, cntBadCsum}},
		{"ipv6 bad checksum", withBadCsum(udp(peer6, portStrict, msg)), xdpPass, nil, []Counter{cntKnown, cntBadCsum}},
		{"bad checksum, loose port, stranger", withBadCsum(udp(stranger4, portLoose, msg)), xdpPass, nil, []Counter{cntUnknown, cntBadCsum}},
		{"bad checksum, strict port, stranger", withBadCsum(udp(stranger4, portStrict, msg)), xdpDrop, nil, []Counter{cntDropPeer}},
		{"vlan ipv4 bad checksum", withVLAN(withBadCsum(udp(peer4, portStrict, msg))), xdpPass, nil, []Counter{cntKnown, cntBadCsum}},
		{"ipv4 options bad checksum", withOptions(withBadCsum(udp(peer4, portStrict, msg)), 8), xdpPass, nil, []Counter{cntKnown, cntBadCsum}},

		// Peers. The payload is not read: any bytes, a request or not.
		{"known peer, strict port", udp(peer4, portStrict, msg), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"known peer, loose port", udp(peer4, portLoose, msg), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"unknown peer, strict port", udp(stranger4, portStrict, msg), xdpDrop, nil, []Counter{cntDropPeer}},
		{"unknown port of known ip, strict", udp(netip.AddrPortFrom(peer4.Addr(), 5001), portStrict, msg), xdpDrop, nil, []Counter{cntDropPeer}},
		{"unknown peer, loose port", udp(stranger4, portLoose, msg), xdpPass,
			&wantMeta{fiAddr: math.MaxUint64, flags: unknown}, []Counter{cntUnknown, cntNoXSK}},
		{"vlan known peer", withVLAN(udp(peer4, portStrict, msg)), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"vlan unknown peer strict", withVLAN(udp(stranger4, portStrict, msg)), xdpDrop, nil, []Counter{cntDropPeer}},
		{"ipv4 options", withOptions(udp(peer4, portStrict, msg), 8), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"ipv6 known peer", udp(peer6, portStrict, msg), xdpPass, p6, []Counter{cntKnown, cntNoXSK}},
		{"ipv6 unknown peer strict", udp(netip.MustParseAddrPort("[fd00::9]:5000"), portStrict, msg), xdpDrop, nil, []Counter{cntDropPeer}},
		{"vlan ipv6 known peer", withVLAN(udp(peer6, portStrict, msg)), xdpPass, p6, []Counter{cntKnown, cntNoXSK}},
		{"not xdpfab payload", udp(peer4, portStrict, []byte("hello, this is not xdpfab at all, not even close....")), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"empty payload", udp(peer4, portStrict, nil), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
		{"seventeen ops", udp(peer4, portStrict, request(distinctReads(17)...)), xdpPass, p4, []Counter{cntKnown, cntNoXSK}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.frame.build()
			before := readCounters(t, objs.Counters)
			res := run(t, objs.XdpfabXdp, data)
			after := readCounters(t, objs.Counters)

			require.Equal(t, tc.action, res.action, "XDP action")
			require.Equal(t, data, res.out, "the packet must leave unchanged")
			if tc.meta == nil {
				require.Empty(t, res.meta, "no metadata expected")
			} else {
				require.Len(t, res.meta, MetaLen)
				m, ok := ParseMeta(res.meta)
				require.True(t, ok, "metadata magic")
				require.NotZero(t, m.Flags&MetaCsumOK, "only datagrams with a verified checksum get metadata")
				require.Equal(t, *tc.meta, wantMeta{fiAddr: m.FiAddr, flags: m.Flags &^ MetaCsumOK, authKey: m.AuthKeyId})
				require.Equal(t, [7]uint8{}, m.Pad)
			}
			want := make([]uint64, len(before))
			want[cntTotal] = 1
			for _, c := range tc.counters {
				want[c]++
			}
			delta := make([]uint64, len(before))
			for i := range delta {
				delta[i] = after[i] - before[i]
			}
			require.Equal(t, counterMap(want), counterMap(delta), "counters moved")
		})
	}
}

// TestProgramChecksum checks the program's UDP checksum over every
// payload length the chunked sum treats differently (256-byte chunks,
// 8-byte words, a 4-byte word, 1 to 3 trailing bytes), IPv4 and IPv6: intact the
// datagram gets metadata marked checksum-OK, with one byte changed anywhere
// in the payload it passes to the stack unmarked.
func TestProgramChecksum(t *testing.T) {
	objs := loadTestObjects(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var lens []int
	for n := 0; n <= 80; n++ {
		lens = append(lens, n)
	}
	for _, base := range []int{248, 256, 288, 504, 512, 544, 1024, 3072} {
		for d := -5; d <= 5; d++ {
			lens = append(lens, base+d)
		}
	}
	lens = append(lens, 3300)
	for _, src := range []netip.AddrPort{peer4, peer6} {
		for _, n := range lens {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			f := udp(src, portLoose, payload)
			res := run(t, objs.XdpfabXdp, f.build())
			require.Equal(t, uint32(xdpPass), res.action)
			m, ok := ParseMeta(res.meta)
			require.True(t, ok, "%v, %d bytes: intact datagram gets metadata", src, n)
			require.NotZero(t, m.Flags&MetaCsumOK, "%v, %d bytes", src, n)
			if n == 0 {
				continue
			}
			bad := f.build()
			bad[len(bad)-n+rng.IntN(n)] ^= byte(1 + rng.IntN(255))
			before := readCounters(t, objs.Counters)
			res = run(t, objs.XdpfabXdp, bad)
			after := readCounters(t, objs.Counters)
			require.Equal(t, uint32(xdpPass), res.action)
			require.Empty(t, res.meta, "%v, %d bytes: corrupted datagram gets no metadata", src, n)
			require.Equal(t, uint64(1), after[cntBadCsum]-before[cntBadCsum])
		}
	}
}

// TestProgramTruncated cuts well-formed xdpfab frames at every length from
// the Ethernet header on: each must pass to the stack unchanged, counted
// as malformed, never dropped.
func TestProgramTruncated(t *testing.T) {
	objs := loadTestObjects(t)
	for _, f := range []frame{
		udp(peer4, portStrict, request(distinctReads(1)...)),
		udp(stranger4, portStrict, request(distinctReads(1)...)),
		withVLAN(udp(peer4, portStrict, request(distinctReads(2)...))),
		withOptions(udp(peer4, portStrict, request(msgOp(4))), 12),
		udp(peer6, portStrict, request(distinctReads(1)...)),
	} {
		full := f.build()
		for n := 14; n < len(full); n++ {
			data := full[:n]
			before := readCounters(t, objs.Counters)
			res := run(t, objs.XdpfabXdp, data)
			after := readCounters(t, objs.Counters)
			require.Equal(t, uint32(xdpPass), res.action, "len %d of %d", n, len(full))
			require.Equal(t, data, res.out)
			require.Empty(t, res.meta)
			require.Equal(t, uint64(1), after[cntMalformed]-before[cntMalformed], "len %d of %d", n, len(full))
			require.Equal(t, uint64(2), sum(after)-sum(before), "len %d: only rx_total and pass_malformed move", n)
		}
	}
}

func sum(v []uint64) (s uint64) {
	for _, n := range v {
		s += n
	}
	return s
}

func counterMap(v []uint64) map[string]uint64 {
	m := map[string]uint64{}
	for i, n := range v {
		if n != 0 {
			m[Counter(i).Name()] = n
		}
	}
	return m
}

func withCsum(f frame, c uint16) frame { f.csum = &c; return f }

// withBadCsum gives f the checksum it should have, off by one.
func withBadCsum(f frame) frame {
	b := f.build()
	c := binary.BigEndian.Uint16(b[len(b)-len(f.payload)-2:]) ^ 1
	return withCsum(f, c)
}

func withVLAN(f frame) frame           { f.vlan = true; return f }
func withFrag(f frame, v uint16) frame { f.fragOff = v; return f }
func withV6Frag(f frame) frame         { f.v6Frag = true; return f }
func withIHL(f frame, ihl int) frame   { f.ihl = ihl; return f }
func withUDPLen(f frame, n int) frame  { f.udpLen = n; return f }
func withIPLen(f frame, n int) frame   { f.ipLen = n; return f }
func withVersion6In4(f frame) frame    { f.badVersion = true; return f }
func withOptions(f frame, n int) frame { f.ipOptions = n; return f }

// TestXSKProbeEmpty runs the queue-occupancy probe on an empty XSKMAP.
func TestXSKProbeEmpty(t *testing.T) {
	objs := loadTestObjects(t)
	res := run(t, objs.XskProbe, make([]byte, 14))
	require.Equal(t, uint32(xdpPass), res.action)
	require.Equal(t, make([]byte, 14), res.out, "no queue bound: bitmap zero")
}

// BenchmarkProgram measures the program per packet in the kernel
// (BPF_PROG_TEST_RUN with repeat); ns/pkt is the kernel's own timing. The
// payload is not read except by the checksum, whose cost grows with it.
func BenchmarkProgram(b *testing.B) {
	testenv.RequirePriv(b)
	spec, err := LoadXdpfab()
	require.NoError(b, err)
	spec.Maps[XdpfabMapAvMap].MaxEntries = 1024
	spec.Maps[XdpfabMapMrMap].MaxEntries = 3
	var objs XdpfabObjects
	require.NoError(b, spec.LoadAndAssign(&objs, nil))
	defer objs.Close()
	peers := newAVTable(b, objs.AvMap, avID, true) // IPv4 peers: compact, as an AV starts
	require.NoError(b, objs.Ports.Put(htons(portStrict), XdpfabPortConfig{AvId: avID, DomainId: domainID, Flags: PortStrict}))
	require.NoError(b, objs.Ports.Put(htons(portBound4), XdpfabPortConfig{AvId: avID, DomainId: domainID,
		Flags: PortStrict | PortBoundAddr, Addr: self4.As16()}))
	require.NoError(b, objs.LocalAddrs.Put(XdpfabLocalAddr{Addr: self4.As16()}, uint32(0)))
	putPeer(b, peers, avKey(avID, peer4), XdpfabAvValue{FiAddr: 42})

	for _, bc := range []struct {
		name  string
		frame frame
	}{
		{"other-udp", udp(peer4, portOther, request(msgOp(16)))},
		// The destination check: a bound port compares the address, a
		// wildcard port looks it up in local_addrs.
		{"other-host-bound", to(udp(peer4, portBound4, request(msgOp(16))), otherHost)},
		{"other-host-wildcard", to(udp(peer4, portStrict, request(msgOp(16))), otherHost)},
		{"strict-drop-bound", udp(stranger4, portBound4, request(msgOp(16)))},
		{"strict-drop", udp(stranger4, portStrict, request(msgOp(16)))},
		{"msg-bound", udp(peer4, portBound4, request(msgOp(16)))},
		{"msg", udp(peer4, portStrict, request(msgOp(16)))},
		{"rma-read-16ops-distinct", udp(peer4, portBound4, request(distinctReads(16)...))},
		{"payload-1400B", udp(peer4, portBound4, make([]byte, 1400))},
		{"payload-3300B", udp(peer4, portBound4, make([]byte, 3300))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := bc.frame.build()
			_, per, err := objs.XdpfabXdp.Benchmark(data, b.N, b.ResetTimer)
			require.NoError(b, err)
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}

// distinctReads returns n 8-byte RMA read descriptors at n different
// addresses: a realistic request payload.
func distinctReads(n int) []wireOp {
	ops := make([]wireOp, n)
	for i := range ops {
		ops[i] = wireOp{opcode: 3, access: 1, respLen: 8, rkey: 0x100, addr: 0x1000 + uint64(8*i)}
	}
	return ops
}
