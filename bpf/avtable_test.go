package bpf

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/ktable"
)

// tableKinds are the two layouts of a peer table: compact (IPv4 peers,
// 16-byte slots) and of 32-byte slots.
var tableKinds = []struct {
	name   string
	create func(*ebpf.MapSpec, int, uint64) (*ktable.AVTable, error)
	nb     func(int) int
}{
	{"compact", ktable.CreateAVTable4, ktable.AVTable4Buckets},
	{"wide", ktable.CreateAVTable, ktable.AVTableBuckets},
}

// newAVTable makes a peer table (compact or not) for AV id and enters it
// in av_map, as package av does (av imports this package, so its tests
// cannot use it), written as av writes it.
func newAVTable(tb testing.TB, avMap *ebpf.Map, id uint32, compact bool) *ktable.AVTable {
	tb.Helper()
	spec, err := LoadXdpfab()
	require.NoError(tb, err)
	create := ktable.CreateAVTable
	if compact {
		create = ktable.CreateAVTable4
	}
	t, err := create(spec.Maps[XdpfabMapAvMap].InnerMap, 2, ktable.RandomSeed())
	require.NoError(tb, err)
	tb.Cleanup(func() { t.Close() })
	require.NoError(tb, avMap.Put(id, t.Map()))
	return t
}

// avPeer lays struct av_key and struct av_value out as a peer table slot.
func avPeer(k *XdpfabAvKey, v *XdpfabAvValue) ktable.Peer {
	return ktable.Peer{Port: k.Port, Addr: [2]uint64{binary.LittleEndian.Uint64(k.Addr[0:8]), binary.LittleEndian.Uint64(k.Addr[8:16])},
		FiAddr: v.FiAddr, AuthKeyID: uint16(v.AuthKeyId), UserIDSet: v.Flags&1 != 0} // AV_ENTRY_USER_ID_SET
}

func putPeer(tb testing.TB, t *ktable.AVTable, k XdpfabAvKey, v XdpfabAvValue) {
	tb.Helper()
	p := avPeer(&k, &v)
	require.NoError(tb, t.Put(&p))
}

func deletePeer(t *ktable.AVTable, k XdpfabAvKey) bool {
	p := avPeer(&k, &XdpfabAvValue{})
	return t.Delete(p.Port, p.Addr)
}

// TestProgramAVConcurrent runs the program on datagrams from one peer in a
// loop while another goroutine enters and removes that peer's AV entry,
// each time with a new fi_addr g and auth key id derived from g: the
// metadata always carries one whole entry (a half-written slot would pair
// an fi_addr with another entry's auth key), a datagram is dropped
// (strict port) or handed up as known, and an entry whose removal
// returned before the run began is never used. Both table layouts.
func TestProgramAVConcurrent(t *testing.T) {
	for _, kind := range tableKinds {
		t.Run(kind.name, func(t *testing.T) { testProgramAVConcurrent(t, kind.name == "compact") })
	}
}

func testProgramAVConcurrent(t *testing.T, compact bool) {
	objs := loadTestObjects(t)
	peers := newAVTable(t, objs.AvMap, avID+1, compact)
	require.NoError(t, objs.Ports.Put(htons(portBound4+10), XdpfabPortConfig{AvId: avID + 1, DomainId: domainID,
		Flags: PortStrict | PortBoundAddr, Addr: self4.As16()}))
	src := netip.MustParseAddrPort("10.200.0.50:6000")
	key := avKey(avID+1, src)
	authOf := func(g uint64) uint32 { return uint32(uint16(g*0x9e3779b9) | 1) } // auth key ids are 16 bits in a peer table

	var removed atomic.Uint64 // the last g whose removal returned
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for g := uint64(1); ; g++ {
			select {
			case <-stop:
				return
			default:
			}
			putPeer(t, peers, key, XdpfabAvValue{FiAddr: g, AuthKeyId: authOf(g)})
			if !deletePeer(peers, key) {
				t.Error("entry vanished")
				return
			}
			removed.Store(g)
		}
	}()
	data := udp(src, portBound4+10, request(msgOp(16))).build()
	in := xdpMd{DataEnd: uint32(len(data))}
	var ctxOut xdpMd
	opts := ebpf.RunOptions{Data: data, DataOut: make([]byte, len(data)+64), Context: in, ContextOut: &ctxOut}
	var known, dropped int
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 200000 && time.Now().Before(deadline); i++ {
		before := removed.Load()
		opts.DataOut = opts.DataOut[:cap(opts.DataOut)]
		act, err := objs.XdpfabXdp.Run(&opts)
		require.NoError(t, err)
		switch act {
		case xdpDrop:
			dropped++
			continue
		case xdpPass:
		default:
			t.Fatalf("run %d: action %d", i, act)
		}
		if ctxOut.Data == 0 {
			continue // passed to the stack: the slot was busy on every try
		}
		m, ok := ParseMeta(opts.DataOut[:ctxOut.Data])
		require.True(t, ok)
		known++
		if m.AuthKeyId != authOf(m.FiAddr) {
			t.Fatalf("run %d: XDP read a half-written entry: fi_addr %d with auth key %#x", i, m.FiAddr, m.AuthKeyId)
		}
		if m.FiAddr <= before {
			t.Fatalf("run %d: entry %d used after its removal returned (last removed %d)", i, m.FiAddr, before)
		}
	}
	close(stop)
	<-done
	t.Logf("%d datagrams known, %d dropped", known, dropped)
	require.NotZero(t, known)
	require.NotZero(t, dropped)
}

// TestProgramAVTableLarge fills a peer table of a bucket count that is
// no power of two with peers (several ports), removes some, and checks
// that the program finds every peer present with its value (fi_addr,
// auth key id) and none removed: Go's placement and av_find's agree, for
// both table layouts. An IPv6 datagram is unknown to a compact table.
func TestProgramAVTableLarge(t *testing.T) {
	for _, kind := range tableKinds {
		t.Run(kind.name, func(t *testing.T) {
			testProgramAVTableLarge(t, kind.create, kind.nb)
		})
	}
}

func testProgramAVTableLarge(t *testing.T, create func(*ebpf.MapSpec, int, uint64) (*ktable.AVTable, error), buckets func(int) int) {
	objs := loadTestObjects(t)
	spec, err := LoadXdpfab()
	require.NoError(t, err)
	const n = 3000
	nb := buckets(n)
	require.NotZero(t, nb&(nb-1), "want a bucket count that is no power of two")
	tab, err := create(spec.Maps[XdpfabMapAvMap].InnerMap, nb, ktable.RandomSeed())
	require.NoError(t, err)
	t.Cleanup(func() { tab.Close() })
	require.NoError(t, objs.AvMap.Put(uint32(avID+2), tab.Map()))
	require.NoError(t, objs.Ports.Put(htons(portBound4+11), XdpfabPortConfig{AvId: avID + 2, DomainId: domainID,
		Flags: PortStrict | PortBoundAddr, Addr: self4.As16()}))
	src := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 201, byte(i >> 8), byte(i)}), uint16(5000+i%7))
	}
	keys := make([]XdpfabAvKey, n)
	peers := make([]ktable.Peer, n)
	for i := range n {
		keys[i] = avKey(avID+2, src(i))
		peers[i] = avPeer(&keys[i], &XdpfabAvValue{FiAddr: uint64(1000 + i), AuthKeyId: uint32(i%65535 + 1)})
	}
	got, err := tab.InsertMany(peers)
	require.NoError(t, err)
	require.Equal(t, n, got)
	for i := 0; i < n; i += 3 {
		require.True(t, deletePeer(tab, keys[i]))
	}
	require.Equal(t, n-(n+2)/3, tab.Len())
	for i := range n {
		data := udp(src(i), portBound4+11, request(msgOp(16))).build()
		r := run(t, objs.XdpfabXdp, data)
		if i%3 == 0 {
			require.Equal(t, uint32(xdpDrop), r.action, "peer %d was removed", i)
			continue
		}
		require.Equal(t, uint32(xdpPass), r.action, "peer %d", i)
		m, ok := ParseMeta(r.meta)
		require.True(t, ok, "peer %d", i)
		require.Equal(t, uint64(1000+i), m.FiAddr, "peer %d", i)
		require.Equal(t, uint32(i%65535+1), m.AuthKeyId, "peer %d", i)
	}
}

// TestProgramAVTableCompactIPv6: a compact table holds IPv4 peers only,
// so an IPv6 datagram is unknown to it even where an IPv4 peer's entry
// carries the same port and the same last four address bytes (the slot
// keeps only those), and the same peer as IPv4 is known.
func TestProgramAVTableCompactIPv6(t *testing.T) {
	objs := loadTestObjects(t)
	peers := newAVTable(t, objs.AvMap, avID+3, true)
	const port = portStrict + 20
	require.NoError(t, objs.Ports.Put(htons(port), XdpfabPortConfig{AvId: avID + 3, DomainId: domainID, Flags: PortStrict}))
	v4 := netip.MustParseAddrPort("10.202.0.7:5000")
	putPeer(t, peers, avKey(avID+3, v4), XdpfabAvValue{FiAddr: 77, AuthKeyId: 3})
	v6 := netip.AddrPortFrom(netip.AddrFrom16([16]byte{0xfd, 0, 12: 10, 202, 0, 7}), 5000)

	r := run(t, objs.XdpfabXdp, udp(v6, port, request(msgOp(16))).build())
	require.Equal(t, uint32(xdpDrop), r.action, "an IPv6 peer is never in a compact table")
	r = run(t, objs.XdpfabXdp, udp(v4, port, request(msgOp(16))).build())
	require.Equal(t, uint32(xdpPass), r.action)
	m, ok := ParseMeta(r.meta)
	require.True(t, ok)
	require.Equal(t, uint64(77), m.FiAddr)
	require.Equal(t, uint32(3), m.AuthKeyId)
}
