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
	// Submit's fields: in the lines hintSubmit asks for.
	inSubmitLines := func(off, end uintptr) bool {
		switch {
		case end <= cacheLine:
			return true // cfg's first line
		case off >= submitStart&^(cacheLine-1) && end <= submitEnd:
			return true
		}
		l := submitCounters &^ (cacheLine - 1)
		return off >= l && end <= l+cacheLine
	}
	for _, name := range []string{"tr", "mu", "closed", "timerArm", "rxDeferred", "held", "lastPeer", "ops", "freeOps",
		"active", "heldPass", "timerNext", "tmWhen", "tmIndex", "txq", "txPool", "txBuild", "txLater", "freeSlots", "txBytesShown"} {
		f, _ := engine.FieldByName(name)
		if !inSubmitLines(f.Offset, f.Offset+f.Type.Size()) {
			t.Errorf("Engine.%s (bytes %d-%d) is not in Submit's lines", name, f.Offset, f.Offset+f.Type.Size())
		}
	}
	config := reflect.TypeOf(Config{})
	for _, name := range []string{"EndpointID", "Window", "MaxPacket", "InjectSize", "RetryInitial", "RetryMax", "CoalesceAt", "MoreHold"} {
		f, _ := config.FieldByName(name)
		if !inSubmitLines(f.Offset, f.Offset+f.Type.Size()) {
			t.Errorf("Config.%s (bytes %d-%d) is not in Submit's lines", name, f.Offset, f.Offset+f.Type.Size())
		}
	}
	if lines := 2 + (submitEnd-1)/cacheLine - submitStart/cacheLine + 1; lines > maxSubmitLines {
		t.Errorf("Submit's state spans %d lines, at most %d", lines, maxSubmitLines)
	}
	stats, _ := engine.FieldByName("stats")
	for _, name := range []string{"submitted", "txBytes", "txRequests"} {
		f, _ := reflect.TypeOf(counters{}).FieldByName(name)
		if off := stats.Offset + f.Offset; !inSubmitLines(off, off+f.Type.Size()) {
			t.Errorf("counters.%s (byte %d of the Engine) is not in Submit's lines", name, off)
		}
	}
	counters := reflect.TypeOf(counters{})
	for _, name := range []string{"submitted", "srtt", "txBytes", "txRequests", "rxResponses", "opsDone"} {
		f, _ := counters.FieldByName(name)
		if end := stats.Offset + f.Offset + f.Type.Size(); end > hotEnd {
			t.Errorf("counters.%s ends at byte %d of the Engine, past the per-operation state's %d", name, end, hotEnd)
		}
	}
	if size := unsafe.Sizeof(op{}); size != 3*cacheLine {
		t.Errorf("op is %d bytes, not three lines", size)
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
	fieldsInFirstLines(t, rp, 2, "peer", "session", "acked", "held", "cache", "win", "lastActive", "lruAt", "share", "needAck")
	if f, _ := rp.FieldByName("winBits"); f.Offset < 2*cacheLine {
		t.Errorf("rxPeer.winBits at byte %d, in the lines every request reads", f.Offset)
	}
	if size := unsafe.Sizeof(rxPeer{}); size%cacheLine != 0 {
		t.Errorf("rxPeer is %d bytes, not whole lines (its size class would not keep it aligned)", size)
	}
}

// fieldsInFirstLines checks that each named field of typ ends within its
// first lines cache lines.
func fieldsInFirstLines(t *testing.T, typ reflect.Type, lines uintptr, names ...string) {
	t.Helper()
	for _, name := range names {
		f, ok := typ.FieldByName(name)
		if !ok {
			t.Errorf("%s has no field %s", typ.Name(), name)
			continue
		}
		if end := f.Offset + f.Type.Size(); end > lines*cacheLine {
			t.Errorf("%s.%s ends at byte %d, past its first %d lines", typ.Name(), name, end, lines)
		}
	}
}

// TestTxPeerHotLayout holds what Submit reads or writes of its peer
// without coalescing or FI_MORE (txPeerOf's compare, the sequence
// numbers, the op queue, the active list's index, the slot ring, the
// timeout's inputs: sendTimeout reads est.dense and est.srtt) to the
// first two lines of txPeer, and keeps it whole lines.
func TestTxPeerHotLayout(t *testing.T) {
	tp := reflect.TypeOf(txPeer{})
	fieldsInFirstLines(t, tp, 2, "peer", "session", "nextSeq", "base", "qhead", "qtail", "active", "slots", "inflight", "moreOpen", "rto", "destKey")
	est, _ := tp.FieldByName("est")
	re := reflect.TypeOf(rtoEstimator{})
	for _, name := range []string{"dense", "srtt"} {
		f, _ := re.FieldByName(name)
		if end := est.Offset + f.Offset + f.Type.Size(); end > 2*cacheLine {
			t.Errorf("txPeer.est.%s ends at byte %d, past its first two lines", name, end)
		}
	}
	if size := unsafe.Sizeof(txPeer{}); size != 4*cacheLine {
		t.Errorf("txPeer is %d bytes, not four lines (its size class would not keep it aligned)", size)
	}
}

// TestRxEntryLayout keeps a response cache entry one cache line: the
// target releases its peer's previous entry on every request.
func TestRxEntryLayout(t *testing.T) {
	if size := unsafe.Sizeof(rxEntry{}); size != cacheLine {
		t.Errorf("rxEntry is %d bytes, not one line", size)
	}
}
