package spinyield

import (
	"testing"
	"time"
)

// A yield that took long (another thread ran) leaves the next empty round
// free to yield again; AloneYields in a row that came back at once make
// the poller quiet for Quiet from the last round's time; Reset ends the
// quiet.
func TestYielderQuietOnlyAfterAloneYields(t *testing.T) {
	var y Yielder
	slow := func() { y.EmptyRound(time.Now().Add(-time.Second)) } // as if the yield took a second
	slow()
	if !y.quietUntil.IsZero() {
		t.Fatalf("quiet until %v after a slow yield", y.quietUntil)
	}
	now := time.Now().Add(time.Hour) // a yield there "took" less than nothing
	for i := 1; i < AloneYields; i++ {
		y.EmptyRound(now)
	}
	slow() // breaks the run of alone yields
	if !y.quietUntil.IsZero() {
		t.Fatalf("quiet until %v after a slow yield ended a run of alone ones", y.quietUntil)
	}
	for i := 1; i < AloneYields; i++ {
		y.EmptyRound(now)
		if !y.quietUntil.IsZero() {
			t.Fatalf("quiet after %d alone yields, want %d", i, AloneYields)
		}
	}
	y.EmptyRound(now)
	if want := now.Add(Quiet); !y.quietUntil.Equal(want) {
		t.Fatalf("quiet until %v, want %v", y.quietUntil, want)
	}
	y.EmptyRound(now.Add(Quiet / 2)) // inside the quiet time: no yield, no change
	if want := now.Add(Quiet); !y.quietUntil.Equal(want) {
		t.Fatalf("quiet until %v after a quiet round, want %v", y.quietUntil, want)
	}
	y.EmptyRound(now.Add(Quiet)) // alone again after the quiet time: counts anew
	if want := now.Add(Quiet); !y.quietUntil.Equal(want) {
		t.Fatalf("quiet until %v after one more alone yield, want %v", y.quietUntil, want)
	}
	y.Reset()
	if y != (Yielder{}) {
		t.Fatal("Reset left state")
	}
}

func TestYielderNoAllocs(t *testing.T) {
	var y Yielder
	if n := testing.AllocsPerRun(100, func() { y.EmptyRound(time.Now()) }); n != 0 {
		t.Fatalf("%v allocations per empty round", n)
	}
}
