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
