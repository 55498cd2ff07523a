package memorder_test

import (
	"sync"
	"testing"

	"github.com/xdpfab/xdpfab/internal/memorder"
)

type published struct{ a, b uint64 }

// TestPointerPublishes: a reader that loads a pointer a writer stored sees
// every field the writer set before the store (under -race the detector
// checks the edge; without it x86-64 keeps the stores in order and the
// compiler keeps them before the out-of-line store).
func TestPointerPublishes(t *testing.T) {
	var p memorder.Pointer[published]
	if p.Load() != nil {
		t.Fatal("zero Pointer is not nil")
	}
	const n = 100000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= n; i++ {
			o := new(published)
			o.a, o.b = i, ^i
			p.Store(o)
		}
	}()
	var last uint64
	for last < n {
		o := p.Load()
		if o == nil {
			continue
		}
		if o.b != ^o.a {
			t.Fatalf("object %d seen half written: b=%#x", o.a, o.b)
		}
		if o.a < last {
			t.Fatalf("stores seen out of order: %d after %d", o.a, last)
		}
		last = o.a
	}
	wg.Wait()
	p.Store(nil)
	if p.Load() != nil {
		t.Fatal("Store(nil) not seen")
	}
}
