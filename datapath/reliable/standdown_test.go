package reliable

import (
	"testing"
	"time"
)

// TestPollStandsDownOnlyWhenSpinning: under auto progress one Poll (a
// reader that looks once, as an MPI passive target testing a request
// between computations) leaves the receive goroutine receiving; a second
// within pollSpinGap (a reader polling in a loop) stands it down for
// assistHold, and once the polls stop it receives again.
func TestPollStandsDownOnlyWhenSpinning(t *testing.T) {
	e := newEngine(t, listenTransport(t, netOpts{}, 1), Config{}, newTestTarget(64), nil)
	if d := e.standDown(); d != 0 {
		t.Fatalf("standDown before any poll: %v", d)
	}
	e.Poll()
	if d := e.standDown(); d != 0 {
		t.Fatalf("one Poll stood the receive goroutine down for %v", d)
	}
	// Two polls in a row, retried in case the test's goroutine lost its
	// processor between them for longer than pollSpinGap.
	var d time.Duration
	for range 100 {
		e.Poll()
		e.Poll()
		if d = e.standDown(); d > 0 {
			break
		}
	}
	if d <= 0 || d > assistHold {
		t.Fatalf("standDown after polls in a row: %v, want (0, %v]", d, assistHold)
	}
	time.Sleep(assistHold + time.Millisecond)
	if d := e.standDown(); d != 0 {
		t.Fatalf("standDown %v after the polls stopped for longer than assistHold", d)
	}
}
