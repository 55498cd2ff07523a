package mr

import (
	"sync"
	"testing"
	"time"
)

// TestTableLockExcludes: goroutines increment a plain counter under the
// lock, some holding it long enough that the others go through every
// stage of waiting (spin, yield, sleep); no increment is lost, and under
// -race the release store and the acquire are the happens-before edge
// between sections.
func TestTableLockExcludes(t *testing.T) {
	var l tableLock
	var n int
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.Lock()
				n++
				if w == 0 && i%500 == 0 {
					time.Sleep(time.Millisecond) // a long section: Refresh faulting pages in
				}
				if i%2 == 0 {
					l.Unlock()
				} else {
					l.UnlockFenced()
				}
			}
		}()
	}
	wg.Wait()
	if n != workers*each {
		t.Fatalf("counter %d, want %d", n, workers*each)
	}
	if l.waiters.Load() != 0 || l.held != 0 {
		t.Fatalf("lock left waiters %d held %d", l.waiters.Load(), l.held)
	}
}
