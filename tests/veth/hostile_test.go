package veth

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// fabricEndpointID is the endpoint id every fabric endpoint puts in its
// packets (fabric/endpoint.go, endpointID): a forged packet must carry it
// to get past the engine's endpoint check.
const fabricEndpointID = 1

// Ports of the hostile sockets in namespace A, beside the initiators'.
const (
	forgerPort  = 7150 // in the target's AV: its packets pass admission
	strangePort = 7151 // not in the target's AV
)

// forger is a raw UDP socket speaking (and twisting) the wire protocol.
type forger struct {
	t    testing.TB
	conn *net.UDPConn
	dst  *net.UDPAddr
	buf  [2048]byte
	b    wire.Builder
}

func newForger(t testing.TB, tn *testNet, port uint16) *forger {
	t.Helper()
	f := &forger{t: t, dst: net.UDPAddrFromAddrPort(netip.AddrPortFrom(tn.addr(sideB), tn.ports[sideB][0]))}
	do(t, tn.ns[sideA], func() (err error) {
		f.conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(tn.addr(sideA), port)))
		return err
	})
	t.Cleanup(func() { f.conn.Close() })
	return f
}

// req encodes a one-op request.
func (f *forger) req(h wire.Header, d wire.OpDesc, payload []byte) []byte {
	h.Type = wire.TypeReq
	f.b.Reset(f.buf[:], h)
	if err := f.b.AddOp(d, payload, nil); err != nil {
		f.t.Error(err) // not Fatal: the flood runs on its own goroutine
	}
	return f.b.Finish()
}

func (f *forger) send(pkt []byte) { _, _ = f.conn.WriteToUDP(pkt, f.dst) }

// call sends a request until its response arrives (bounded) and returns
// the response's first op.
func (f *forger) call(h wire.Header, d wire.OpDesc, payload []byte) wire.RespDesc {
	f.t.Helper()
	pkt := append([]byte(nil), f.req(h, d, payload)...)
	rbuf := make([]byte, 2048)
	var p wire.Packet
	for try := 0; try < 50; try++ {
		f.send(pkt)
		require.NoError(f.t, f.conn.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
		for {
			n, err := f.conn.Read(rbuf)
			if err != nil {
				break // deadline: send again
			}
			if wire.Decode(rbuf[:n], &p) == nil && p.Type == wire.TypeResp && p.Session == h.Session && p.Seq == h.Seq {
				return p.Resps[0]
			}
		}
	}
	f.t.Fatalf("no response to forged seq %d", h.Seq)
	return wire.RespDesc{}
}

func TestHostileFlood(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		const initiators, perInitiator, depth = 2, 5000, 32
		tn := newNet(t, tc, netOpts{nA: initiators})
		target := tn.target()
		key := target.region.Key()
		forged, strange := newForger(t, tn, forgerPort), newForger(t, tn, strangePort)
		var fa [1]fi.Addr
		n, err := target.av.InsertAddrPort([]netip.AddrPort{netip.AddrPortFrom(tn.addr(sideA), forgerPort)}, fa[:], 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// The forger opens a session of its own and moves it 300 requests
		// on with RMA writes under a wrong rkey: each is executed once and
		// NAKed with the MR lookup's errno, and changes nothing.
		const session, executed = 5, 300
		hdr := func(seq uint32) wire.Header {
			return wire.Header{SrcEP: fabricEndpointID, DstEP: fabricEndpointID, Session: session, Seq: seq}
		}
		badKey := key ^ 0x5a5a
		for seq := uint32(1); seq <= executed; seq++ {
			r := forged.call(hdr(seq), wire.OpDesc{Opcode: wire.OpRMAWrite, RKey: badKey}, []byte("forged!!"))
			require.Equal(t, uint32(fi.ErrnoOf(mr.UnknownKey)), r.Errno, "forged write under a wrong rkey (seq %d) NAKed", seq)
		}

		fetchAdd := wire.OpDesc{Opcode: wire.OpFetchAtomic, RKey: key, RespLen: 8, Count: 1,
			Datatype: uint8(fatomic.UINT64), AtomicOp: uint8(fatomic.SUM)}
		before := target.ep.Stats()
		stop := make(chan struct{})
		flooded := make(chan int)
		go func() {
			rng := rand.New(rand.NewPCG(7, 7))
			junk := make([]byte, 256)
			sent := 0
			defer func() { flooded <- sent }()
			for i := 0; i < 300_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var pkt []byte
				f := forged
				switch i % 10 {
				case 0: // random bytes
					pkt = junk[:rng.IntN(len(junk))]
					for j := range pkt {
						pkt[j] = byte(rng.Uint32())
					}
				case 1: // random bytes behind a valid magic and version
					pkt = junk[:wire.HeaderLen+rng.IntN(len(junk)-wire.HeaderLen)]
					for j := range pkt {
						pkt[j] = byte(rng.Uint32())
					}
					pkt[0], pkt[1] = wire.Magic, wire.Version
				case 2: // bad version
					pkt = f.req(hdr(executed+1), fetchAdd, one)
					pkt[1] = wire.Version + 1
				case 3: // an op claiming more payload than the packet holds
					pkt = f.req(hdr(executed+1), fetchAdd, one)
					binary.LittleEndian.PutUint32(pkt[wire.HeaderLen+8:], 200)
				case 4: // truncated
					pkt = f.req(hdr(executed+1), fetchAdd, one)
					pkt = pkt[:len(pkt)-3]
				case 5: // a valid fetch-add on the real counter from a source not in the AV
					f = strange
					pkt = f.req(wire.Header{SrcEP: fabricEndpointID, DstEP: fabricEndpointID, Session: 9, Seq: 1 + uint32(rng.IntN(8))}, fetchAdd, one)
				case 6: // replay of an executed request: answered from the cache, not executed
					pkt = f.req(hdr(executed-uint32(rng.IntN(10))), wire.OpDesc{Opcode: wire.OpRMAWrite, RKey: badKey}, []byte("forged!!"))
				case 7: // stale: older than the response cache
					pkt = f.req(hdr(1+uint32(rng.IntN(10))), fetchAdd, one)
				case 8: // far beyond the window
					pkt = f.req(hdr(executed+1+1<<20+uint32(rng.IntN(1000))), fetchAdd, one)
				case 9: // another session mid-stream, or another endpoint id
					if rng.IntN(2) == 0 {
						h := hdr(5000)
						h.Session = session + 1
						pkt = f.req(h, fetchAdd, one)
					} else {
						h := hdr(executed + 1)
						h.DstEP = fabricEndpointID + 7
						pkt = f.req(h, fetchAdd, one)
					}
				}
				f.send(pkt)
				sent++
				if i%64 == 63 {
					time.Sleep(200 * time.Microsecond) // a flood the shared test machine survives
				}
			}
		}()

		start := time.Now()
		results := make([][]uint64, initiators)
		errs := make(chan error, initiators)
		for i, n := range tn.nodes[sideA] {
			go func() {
				var err error
				results[i], err = fetchAdds{n: n, peer: n.peers[0], key: key, total: perInitiator, depth: depth,
					timeout: 60 * time.Second}.run()
				errs <- err
			}()
		}
		var werr error
		for range initiators {
			if err := <-errs; err != nil && werr == nil {
				werr = err
			}
		}
		close(stop)
		sent := <-flooded
		require.NoError(t, werr)
		a := tn.nodes[sideA][0]
		require.Equal(t, uint64(initiators*perInitiator), binary.LittleEndian.Uint64(a.read(t, a.peers[0], 0, 8, key)),
			"counter after the workload: no forged fetch-add executed")
		checkPermutation(t, results)

		after := target.ep.Stats()
		drops := map[string]uint64{}
		for r := range reliable.NumDropReasons {
			if d := after.Drops[r] - before.Drops[r]; d > 0 {
				drops[r.String()] = d
			}
		}
		t.Logf("%d fetch-adds in %v beside %d hostile packets; target drops %v, replayed from cache %d",
			initiators*perInitiator, time.Since(start).Round(time.Millisecond), sent, drops, after.ReplayedFromCache-before.ReplayedFromCache)
		// Well-formed packets of an admitted peer reach the engine on
		// every transport; the rest may be dropped in the kernel first.
		want := []reliable.DropReason{reliable.DropTooOld, reliable.DropTooFar, reliable.DropStaleSession, reliable.DropWrongEndpoint}
		if !tc.kernelFilters {
			want = append(want, reliable.DropNotOurs, reliable.DropVersion, reliable.DropMalformed, reliable.DropUnknownSource)
		}
		for _, r := range want {
			require.Positive(t, drops[r.String()], "no %v drops counted", r)
		}
		require.Greater(t, after.ReplayedFromCache, before.ReplayedFromCache, "replays answered from the cache")
	})
}
