package main

import (
	"runtime"
	"testing"
)

// TestSettleHeapOnce: the first enable's collection runs once a process,
// not once an endpoint (a process opening thousands of endpoints must not
// pay a collection for each).
func TestSettleHeapOnce(t *testing.T) {
	forced := func() uint32 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.NumForcedGC
	}
	before := forced()
	settleHeap()
	first := forced() - before
	if first > 1 {
		t.Fatalf("first settleHeap forced %d collections, want at most 1", first)
	}
	for range 3 {
		settleHeap()
	}
	if n := forced() - before - first; n != 0 {
		t.Fatalf("later settleHeaps forced %d collections, want 0", n)
	}
}
