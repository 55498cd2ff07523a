package reliable

import (
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// TestHeldSentOnAssist: requests coalescing holds (the target stalled, no
// response to pack them at, MoreHold far away) go out, packed into one
// packet, as soon as a reader assists the engine (held.go); requests held
// by FI_MORE stay held.
func TestHeldSentOnAssist(t *testing.T) {
	ini, c, peer, openGate, before := stalledWithHeld(t, 10*time.Second)
	time.Sleep(20 * time.Millisecond)
	if n := ini.Stats().TxRequests - before; n != 1 {
		t.Fatalf("%d packets before the reader assisted, want 1 (3 held)", n)
	}
	if !ini.BeginAssist() {
		t.Skip("transport cannot be assisted")
	}
	ini.Assist()
	ini.EndAssist()
	if n := ini.Stats().TxRequests - before; n != 2 {
		t.Fatalf("%d packets after the reader assisted, want 2 (3 held, sent as one)", n)
	}
	// FI_MORE: the application said more is coming; assisting sends nothing.
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: 5, Payload: []byte{1}, Flags: fi.MORE}); err != nil {
		t.Fatal(err)
	}
	if ini.BeginAssist() {
		ini.Assist()
		ini.EndAssist()
	}
	if n := ini.Stats().TxRequests - before; n != 2 {
		t.Fatalf("%d packets after assisting with an FI_MORE request queued, want 2", n)
	}
	if err := ini.Flush(peer); err != nil {
		t.Fatal(err)
	}
	openGate()
	for range 5 {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
}

// TestRefillHeldUntilReader: after a response completed several ops, the
// requests submitted next are held although nothing is in flight (the
// application is reposting what it got back), and go out together in one
// packet when a reader comes back; after a response that completed one op
// (a ping-pong) the next request goes out at once. Without a reader
// nothing is held (TestMoreAndFence).
func TestRefillHeldUntilReader(t *testing.T) {
	tgt := newTestTarget(4096)
	ini, c, target := pair(t, netOpts{cfg: Config{RetryInitial: 10 * time.Second, RetryMax: 10 * time.Second,
		MoreHold: 10 * time.Second}}, tgt)
	peer := Peer{target.LocalAddr(), 2}
	write := func(i int, flags fi.Flags) {
		t.Helper()
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: uint64(i), Payload: []byte{1}, Flags: flags}); err != nil {
			t.Fatal(err)
		}
	}
	waitAll := func(n int) {
		t.Helper()
		for range n {
			if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
				t.Fatal(cp)
			}
		}
	}
	sent := func() uint64 { time.Sleep(20 * time.Millisecond); return ini.Stats().TxRequests }
	// A reader assists (the hold is only for engines whose readers come
	// back, readerReturns). One op answered alone: the next goes out at
	// once.
	if !ini.BeginAssist() {
		t.Skip("transport cannot be assisted")
	}
	ini.Assist()
	ini.EndAssist()
	write(0, 0)
	waitAll(1)
	before := sent()
	write(1, 0)
	if n := sent() - before; n != 1 {
		t.Fatalf("%d packets after a single completion, want 1 at once", n)
	}
	waitAll(1)
	// Eight ops in one packet, answered together: the eight reposted
	// wait for the reader's return.
	for i := range 7 {
		write(i, fi.MORE)
	}
	write(7, 0)
	waitAll(8)
	before = sent()
	for i := range 8 {
		write(i, 0)
	}
	if n := sent() - before; n != 0 {
		t.Fatalf("%d packets before the reader came back, want 0 (8 held)", n)
	}
	if !ini.BeginAssist() {
		t.Skip("transport cannot be assisted")
	}
	ini.Assist()
	ini.EndAssist()
	if n := sent() - before; n != 1 {
		t.Fatalf("%d packets after the reader came back, want 1 (8 ops)", n)
	}
	waitAll(8)
}
