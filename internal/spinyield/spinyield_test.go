package spinyield

import (
	"testing"
	"time"
)

// A yield that took long (another thread ran) leaves the next empty round
// free to yield again; one that came back at once makes the poller quiet
// for Quiet from the round's time; Reset ends the quiet.
func TestYielderQuietOnlyAfterAloneYield(t *testing.T) {
	var y Yielder
	y.EmptyRound(time.Now().Add(-time.Second)) // as if the yield took a second
	if !y.quietUntil.IsZero() {
		t.Fatalf("quiet until %v after a slow yield", y.quietUntil)
	}
	now := time.Now().Add(time.Hour) // the yield "took" less than nothing
	y.EmptyRound(now)
	if want := now.Add(Quiet); !y.quietUntil.Equal(want) {
		t.Fatalf("quiet until %v, want %v", y.quietUntil, want)
	}
	y.EmptyRound(now.Add(Quiet / 2)) // inside the quiet time: no yield, no change
	if want := now.Add(Quiet); !y.quietUntil.Equal(want) {
		t.Fatalf("quiet until %v after a quiet round, want %v", y.quietUntil, want)
	}
	y.Reset()
	if !y.quietUntil.IsZero() {
		t.Fatal("Reset left the quiet time")
	}
}

func TestYielderNoAllocs(t *testing.T) {
	var y Yielder
	if n := testing.AllocsPerRun(100, func() { y.EmptyRound(time.Now()) }); n != 0 {
		t.Fatalf("%v allocations per empty round", n)
	}
}
