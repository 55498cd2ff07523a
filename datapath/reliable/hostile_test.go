package reliable

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

const forgerEP = 77 // an admitted endpoint id the flooder also uses

// flood sends random and forged packets at target until stop closes (or
// maxPackets are sent), from two sockets: one whose endpoint ids are not
// admitted ("unknown source") and one posing as admitted endpoint 77.
func flood(t *testing.T, target netip.AddrPort, stop <-chan struct{}, maxPackets int) {
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	dst := net.UDPAddrFromAddrPort(target)
	rng := rand.New(rand.NewPCG(9, 9))
	buf := make([]byte, 2048)
	var b wire.Builder
	req := func(h wire.Header, d wire.OpDesc, payload []byte) []byte {
		h.Type = wire.TypeReq
		b.Reset(buf, h)
		_ = b.AddOp(d, payload, nil)
		return b.Finish()
	}
	fa := wire.OpDesc{Opcode: wire.OpFetchAtomic, RKey: 1, RespLen: 8}
	one := le64(1)
	// The forger opens a real session (seq 1 is executed once: a MSG that
	// does not touch the counter), then replays and forges around it.
	_, _ = conn.WriteToUDP(req(wire.Header{SrcEP: forgerEP, DstEP: 100, Session: 5, Seq: 1},
		wire.OpDesc{Opcode: wire.OpMsg, Count: 1}, []byte("x")), dst)
	for i := 0; i < maxPackets; i++ {
		select {
		case <-stop:
			return
		default:
		}
		var pkt []byte
		switch i % 9 {
		case 0: // random bytes
			pkt = buf[:rng.IntN(200)]
			for j := range pkt {
				pkt[j] = byte(rng.Uint32())
			}
		case 1: // random bytes behind a valid magic/version
			pkt = buf[:wire.HeaderLen+rng.IntN(200)]
			for j := range pkt {
				pkt[j] = byte(rng.Uint32())
			}
			pkt[0], pkt[1] = wire.Magic, wire.Version
		case 2: // bad version
			pkt = req(wire.Header{SrcEP: 1, DstEP: 100, Session: 1, Seq: 1}, fa, one)
			pkt[1] = 9
		case 3: // bad lengths: op claims more payload than present
			pkt = req(wire.Header{SrcEP: 1, DstEP: 100, Session: 1, Seq: 1}, fa, one)
			pkt[wire.HeaderLen+8] = 200
		case 4: // truncated
			pkt = req(wire.Header{SrcEP: 1, DstEP: 100, Session: 1, Seq: 1}, fa, one)
			pkt = pkt[:len(pkt)-3]
		case 5: // well-formed fetch-add from an unknown source (endpoint not admitted)
			pkt = req(wire.Header{SrcEP: 999, DstEP: 100, Session: 1, Seq: 1}, fa, one)
		case 6: // the forger replays its executed seq 1 (answered from cache, not re-executed)
			pkt = req(wire.Header{SrcEP: forgerEP, DstEP: 100, Session: 5, Seq: 1},
				wire.OpDesc{Opcode: wire.OpMsg, Count: 1}, []byte("x"))
		case 7: // stale/far sequence numbers in the forger's session
			pkt = req(wire.Header{SrcEP: forgerEP, DstEP: 100, Session: 5, Seq: 1 + 1<<20 + uint32(rng.IntN(1000))}, fa, one)
		case 8: // another session mid-stream (stale session), and a wrong endpoint id
			if rng.IntN(2) == 0 {
				pkt = req(wire.Header{SrcEP: forgerEP, DstEP: 100, Session: 6, Seq: 5000}, fa, one)
			} else {
				pkt = req(wire.Header{SrcEP: forgerEP, DstEP: 55, Session: 5, Seq: 2}, fa, one)
			}
		}
		_, _ = conn.WriteToUDP(pkt, dst)
		if i%64 == 63 {
			time.Sleep(100 * time.Microsecond) // a flood, but one the test machine survives
		}
	}
}

// TestHostileInput floods the target with garbage and forged packets while
// 4 initiators do fetch-adds: no crash, exact results, drops counted by reason.
func TestHostileInput(t *testing.T) {
	checkGoroutines(t)
	admit := func(p Peer, _ datapath.Meta) bool { return p.EP <= 4 || p.EP == forgerEP }
	var target netip.AddrPort
	o := netOpts{cfg: Config{Admit: admit}, loss: 0.01, seed: 11,
		during: func(addr netip.AddrPort, stop <-chan struct{}) {
			target = addr
			flood(t, addr, stop, 200000)
		}}
	s := fetchAddRun(t, o, 4, 5000, 32)
	t.Logf("target %v drops: %v; replayed %d", target, dropsByName(s), s.ReplayedFromCache)
	for _, r := range []DropReason{DropNotOurs, DropVersion, DropMalformed, DropUnknownSource, DropTooFar,
		DropStaleSession, DropWrongEndpoint} {
		if s.Drops[r] == 0 {
			t.Errorf("no %v drops counted", r)
		}
	}
	if s.ReplayedFromCache == 0 {
		t.Error("forged replays were not answered from the cache")
	}
}

func dropsByName(s Stats) map[string]uint64 {
	m := map[string]uint64{}
	for r, n := range s.Drops {
		if n > 0 {
			m[DropReason(r).String()] = n
		}
	}
	return m
}
