package bpf

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/ktable"
)

// newAVTable makes a kernel table for AV id and enters it in av_map, as
// package av does (av imports this package, so its tests cannot use it):
// owned by its one writer (ktable Own), written as av writes it.
func newAVTable(tb testing.TB, avMap *ebpf.Map, id uint32) *ktable.Table {
	tb.Helper()
	spec, err := LoadXdpfab()
	require.NoError(tb, err)
	t, err := ktable.Create(spec.Maps[XdpfabMapAvMap].InnerMap, 2, ktable.RandomSeed())
	require.NoError(tb, err)
	t.Own()
	tb.Cleanup(func() { t.Close() })
	require.NoError(tb, avMap.Put(id, t.Map()))
	return t
}

// avWords lays struct av_key and struct av_value out as table words.
func avWords(k *XdpfabAvKey, v *XdpfabAvValue) (ktable.Key, ktable.Value) {
	b := (*[24]byte)(unsafe.Pointer(k))
	return ktable.Key{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])},
		ktable.Value{v.FiAddr, uint64(v.AuthKeyId) | uint64(v.Flags)<<32}
}

func putPeer(tb testing.TB, t *ktable.Table, k XdpfabAvKey, v XdpfabAvValue) {
	tb.Helper()
	kw, vw := avWords(&k, &v)
	require.NoError(tb, t.Put(&kw, &vw))
}

func deletePeer(t *ktable.Table, k XdpfabAvKey) bool {
	kw, _ := avWords(&k, &XdpfabAvValue{})
	return t.Delete(&kw)
}

// TestProgramAVConcurrent runs the program on datagrams from one peer in a
// loop while another goroutine enters and removes that peer's AV entry,
// each time with a new fi_addr g and auth key id derived from g: the
// metadata always carries one whole entry (a half-written slot would pair
// an fi_addr with another entry's auth key), a datagram is dropped
// (strict port) or handed up as known, and an entry whose removal
// returned before the run began is never used.
func TestProgramAVConcurrent(t *testing.T) {
	objs := loadTestObjects(t)
	peers := newAVTable(t, objs.AvMap, avID+1)
	require.NoError(t, objs.Ports.Put(htons(portBound4+10), XdpfabPortConfig{AvId: avID + 1, DomainId: domainID,
		Flags: PortStrict | PortBoundAddr, Addr: self4.As16()}))
	src := netip.MustParseAddrPort("10.200.0.50:6000")
	key := avKey(avID+1, src)
	authOf := func(g uint64) uint32 { return uint32(g*0x9e3779b9) | 1 }

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
