package reliable

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestEngineHotLayout holds the fields every operation of an initiator
// touches (Submit, a response's receive and completion) to the first
// maxHotLines cache lines of the Engine (Engine's Layout; hintHot hints
// exactly those): a field moved or added so that one of them falls
// outside, or the block grows past the bound, fails here.
func TestEngineHotLayout(t *testing.T) {
	if lines := (hotEnd + cacheLine - 1) / cacheLine; lines > maxHotLines {
		t.Errorf("per-operation state spans %d lines (ends at byte %d), at most %d", lines, hotEnd, maxHotLines)
	}
	engine := reflect.TypeOf(Engine{})
	hot := []string{"cfg", "tr", "mu", "closed", "timerArm", "onPoller", "rxDeferred", "rxHold", "held",
		"forgetSet", "lastPeer", "ops", "freeOps", "active", "heldPass", "timerNext", "tmWhen", "tmIndex",
		"txq", "txPool", "txBuild", "txLater", "freeSlots", "txBytesShown", "tally", "rxMu", "batchMu",
		"reader", "rxPkts", "rxCompl", "store", "cacheBytesShown", "targetPeersShown", "rxPeers",
		"refusing", "rxDelivered", "polled", "tallyBuf"}
	for _, name := range hot {
		f, ok := engine.FieldByName(name)
		if !ok {
			t.Errorf("Engine has no field %s", name)
			continue
		}
		if end := f.Offset + f.Type.Size(); end > hotEnd {
			t.Errorf("Engine.%s ends at byte %d, past the per-operation state's %d", name, end, hotEnd)
		}
	}
	stats, _ := engine.FieldByName("stats")
	counters := reflect.TypeOf(counters{})
	for _, name := range []string{"inflight", "srtt", "txBytes", "txRequests", "rxResponses", "opsDone"} {
		f, _ := counters.FieldByName(name)
		if end := stats.Offset + f.Offset + f.Type.Size(); end > hotEnd {
			t.Errorf("counters.%s ends at byte %d of the Engine, past the per-operation state's %d", name, end, hotEnd)
		}
	}
	if size := unsafe.Sizeof(op{}); size != 4*cacheLine {
		t.Errorf("op is %d bytes, not four lines", size)
	}
	// The pool's counts share the first line with the small classes' lists.
	pool := reflect.TypeOf(bufPool{})
	for _, name := range []string{"inUse", "limit"} {
		if f, _ := pool.FieldByName(name); f.Offset+f.Type.Size() > cacheLine {
			t.Errorf("bufPool.%s at byte %d, not in the first line", name, f.Offset)
		}
	}
}

// TestRxPeerHotLayout holds the fields a target's in-order request reads
// or writes (handleRequest, deliverHeld, the response cache's lists) to
// the first two cache lines of rxPeer, and the window's bitmap, which
// only out-of-order requests read, out of them.
func TestRxPeerHotLayout(t *testing.T) {
	rp := reflect.TypeOf(rxPeer{})
	for _, name := range []string{"peer", "session", "acked", "held", "cache", "win", "lastActive", "lruAt", "share", "needAck"} {
		f, ok := rp.FieldByName(name)
		if !ok {
			t.Errorf("rxPeer has no field %s", name)
			continue
		}
		if end := f.Offset + f.Type.Size(); end > 2*cacheLine {
			t.Errorf("rxPeer.%s ends at byte %d, past its first two lines", name, end)
		}
	}
	if f, _ := rp.FieldByName("winBits"); f.Offset < 2*cacheLine {
		t.Errorf("rxPeer.winBits at byte %d, in the lines every request reads", f.Offset)
	}
	if size := unsafe.Sizeof(rxPeer{}); size%cacheLine != 0 {
		t.Errorf("rxPeer is %d bytes, not whole lines (its size class would not keep it aligned)", size)
	}
}
