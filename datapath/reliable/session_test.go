package reliable

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
)

// rawInitiator sends hand-made requests to a target engine from one
// socket, so a test controls sessions and sequence numbers exactly.
type rawInitiator struct {
	t    *testing.T
	conn *net.UDPConn
	dst  *net.UDPAddr
	buf  []byte
	bld  wire.Builder
}

func newRawInitiator(t *testing.T, target netip.AddrPort) *rawInitiator {
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawInitiator{t: t, conn: conn, dst: net.UDPAddrFromAddrPort(target), buf: make([]byte, 2048)}
}

func (r *rawInitiator) peer() Peer {
	return Peer{r.conn.LocalAddr().(*net.UDPAddr).AddrPort(), 1}
}

// fetchAdd sends a one-op FETCH_ATOMIC (+1 on the test target's counter).
func (r *rawInitiator) fetchAdd(session, seq uint32) {
	r.bld.Reset(r.buf, wire.Header{Type: wire.TypeReq, SrcEP: 1, DstEP: 2, Session: session, Seq: seq, Ack: seq})
	if err := r.bld.AddOp(wire.OpDesc{Opcode: wire.OpFetchAtomic, Access: wire.AccessRead | wire.AccessWrite,
		RKey: 1, RespLen: 8, Flags: wire.OpFirst | wire.OpLast}, le64(1), nil); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.conn.WriteToUDP(r.bld.Finish(), r.dst); err != nil {
		r.t.Fatal(err)
	}
}

// response waits for the response to (session, seq) and returns the
// fetched value, skipping anything else.
func (r *rawInitiator) response(session, seq uint32) uint64 {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var p wire.Packet
	in := make([]byte, 2048)
	for {
		_ = r.conn.SetReadDeadline(deadline)
		n, _, err := r.conn.ReadFromUDP(in)
		if err != nil {
			r.t.Fatalf("no response to session %d seq %d: %v", session, seq, err)
		}
		if wire.Decode(in[:n], &p) != nil || p.Type != wire.TypeResp || p.Session != session || p.Seq != seq {
			continue
		}
		if p.NumOps != 1 || p.Resps[0].Errno != 0 {
			r.t.Fatalf("response %+v", p.Resps[0])
		}
		return binary.LittleEndian.Uint64(p.Payload(0))
	}
}

// TestRetiredSessions: once an initiator has moved to a new session, or
// the target was told to forget it (fi_av_remove), late packets of the old
// session are stale: they do not reset the session and do not execute,
// even inside a session's first window where a new session may start.
func TestRetiredSessions(t *testing.T) {
	tgt := newTestTarget(64)
	target := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(Config{}, 2), tgt, nil)
	r := newRawInitiator(t, target.LocalAddr())
	const a, b, c = 0xA, 0xB, 0xC

	r.fetchAdd(a, 1)
	if v := r.response(a, 1); v != 0 {
		t.Fatalf("first fetch-add fetched %d", v)
	}
	r.fetchAdd(b, 1) // the initiator restarted: session b
	if v := r.response(b, 1); v != 1 {
		t.Fatalf("new session's fetch-add fetched %d", v)
	}
	stale := target.Stats().Drops[DropStaleSession]
	r.fetchAdd(a, 2) // late packet of the retired session a
	r.fetchAdd(b, 2)
	if v := r.response(b, 2); v != 2 {
		t.Fatalf("session b after a stale packet of a fetched %d, want 2 (a's packet must not execute)", v)
	}
	if d := target.Stats().Drops[DropStaleSession] - stale; d != 1 {
		t.Fatalf("%d stale-session drops, want 1", d)
	}

	// Forgotten (the target's AV removed the initiator): b's late packets
	// stay stale; a new session c starts afresh.
	target.ForgetPeer(r.peer())
	r.fetchAdd(b, 3)
	r.fetchAdd(c, 1)
	if v := r.response(c, 1); v != 3 {
		t.Fatalf("session c after forgetting fetched %d, want 3 (b's late packet must not execute)", v)
	}
	if d := target.Stats().Drops[DropStaleSession] - stale; d != 2 {
		t.Fatalf("%d stale-session drops, want 2", d)
	}
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	if tgt.counter != 4 {
		t.Fatalf("counter %d, want 4: exactly the four live fetch-adds", tgt.counter)
	}
}
