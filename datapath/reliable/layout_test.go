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
	for _, name := range []string{"submitted", "srtt", "txBytes", "txRequests", "rxResponses", "opsDone"} {
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
